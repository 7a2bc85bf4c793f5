"""Command-line front ends, `envbuild` (click) and `envrun` (argparse): they parse options and print results;
what each command does is in envbuild.commands."""
