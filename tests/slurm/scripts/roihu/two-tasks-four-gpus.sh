#!/bin/bash
#SBATCH --account=project_2001234
#SBATCH --partition=gpumedium
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=2
#SBATCH --cpus-per-task=144
#SBATCH --time=08:00:00
#SBATCH --gres=gpu:gh200:4

module purge
module load python-pytorch

srun python3 train.py --strategy ddp
