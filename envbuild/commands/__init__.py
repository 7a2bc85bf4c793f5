"""One module per user command (`envbuild build`, `envrun sbatch`, ...): the work of the command, between the CLI
that parses and prints and the concern packages below."""
