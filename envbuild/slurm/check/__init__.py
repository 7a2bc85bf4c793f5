"""`envrun sbatch --check`: a hand-written batch script read as bash and sbatch read it (shellwords.py,
parse.py), and the rules that find its pitfalls (jobrules.py, steprules.py, pitfalls.py)."""
