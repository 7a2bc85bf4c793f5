#!/bin/bash
module purge
#SBATCH --account=project_2001234
#SBATCH --partition=gpu
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=40
#SBATCH --mem=320G
#SBATCH --time=20:00:00
#SBATCH --gres=gpu:v100:4
module load pytorch

srun torchrun --standalone --nproc_per_node=4 train.py
