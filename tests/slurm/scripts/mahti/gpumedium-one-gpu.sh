#!/bin/bash
#SBATCH --account=project_2001234
#SBATCH --partition=gpumedium
#SBATCH --nodes=1
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=32
#SBATCH --time=24:00:00
#SBATCH --gres=gpu:a100:1

module purge
module load pytorch

srun python3 train.py --epochs 40
