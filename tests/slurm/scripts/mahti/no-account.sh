#!/bin/bash
#SBATCH --job-name=vit-small
#SBATCH --partition=gpusmall
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=32
#SBATCH --time=08:00:00
#SBATCH --gres=gpu:a100:1

module purge
module load pytorch

srun python3 train_vit.py
