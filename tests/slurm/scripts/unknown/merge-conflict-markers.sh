#!/bin/bash
#SBATCH --job-name=sweep
#SBATCH --partition=gpu
#SBATCH --nodes=1
#SBATCH --ntasks=1
#SBATCH --gpus=1
#SBATCH --time=08:00:00

source .venv/bin/activate
<<<<<<< HEAD
srun python sweep.py --lr 1e-4
||||||| merged common ancestors
srun python sweep.py --lr 3e-4
=======
srun python sweep.py --lr 3e-4 --warmup 500
>>>>>>> feature/warmup
