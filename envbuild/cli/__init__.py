"""Command-line front ends: `envbuild` and `envrun`."""
