"""`envrun sbatch`: a batch job planned as plain data (jobplan.py) from the system recipe and the user's
command, its script text (script.py, golden-tested), and its submission and follow-up (submit.py)."""
