#!/bin/bash
#SBATCH --account=training2546
#SBATCH --partition=dc-gpu
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --time=02:00:00

source .venv/bin/activate
srun python evaluate.py --checkpoint checkpoints/last.pt
