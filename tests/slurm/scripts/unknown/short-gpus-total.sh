#!/bin/bash
#SBATCH -J vit
#SBATCH -p gpu_a100
#SBATCH -N 1
#SBATCH -n 1
#SBATCH -c 72
#SBATCH -G 4
#SBATCH -t 1-00:00:00

module load 2024 PyTorch/2.5.1-foss-2024a-CUDA-12.6.0
srun torchrun --standalone --nproc_per_node=4 train_vit.py
