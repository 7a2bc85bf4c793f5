"""Scaling sweeps (`envrun sweep`): one batch job per scale point, their timings collected into a table,
CSV/JSON, a plot and an HTML report. Planning and arithmetic are pure; submission goes through envbuild.slurm."""
