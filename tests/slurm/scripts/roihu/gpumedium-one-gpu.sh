#!/bin/bash
#SBATCH --account=project_2001234
#SBATCH --partition=gpumedium
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=72
#SBATCH --time=04:00:00
#SBATCH --gres=gpu:gh200:1

module purge
module load python-pytorch

srun python3 train.py --batch-size 64
