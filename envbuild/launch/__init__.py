"""envrun's launch: the user's command line read as written, sized and bound to the node (pure planners:
launchplan.py, sizing.py), the environment it runs in (project file, config, overlays, trust), and srun under
envrun's supervision (supervise.py)."""
