"""Slurm, the distributed engine: batch jobs (batch/), the checks of hand-written batch scripts (check/), scaling
sweeps (sweep/), and what the cluster this runs on says about itself (cluster.py)."""
