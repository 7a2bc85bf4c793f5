#!/bin/bash
#SBATCH --account=project_2001234
#SBATCH --partition=gpu
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=10
#SBATCH --mem=90G
#SBATCH --time=6h
#SBATCH --gres=gpu:v100:1

module purge
module load pytorch

srun python3 train.py
