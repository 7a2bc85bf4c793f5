#!/bin/bash
#SBATCH --account=project_2001234
#SBATCH --partition=gpusmall
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=10
#SBATCH --mem=64G
#SBATCH --time=12:00:00
#SBATCH --gres=gpu:v100:1

module purge
module load pytorch

srun python3 train.py
