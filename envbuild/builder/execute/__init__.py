"""Thin executors of build plans: the actions carried out on this machine, with progress and a log."""
