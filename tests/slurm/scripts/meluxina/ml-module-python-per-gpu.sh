#!/bin/bash -l
#SBATCH -A p200301
#SBATCH -p gpu
#SBATCH -q short
#SBATCH -N 1
#SBATCH --ntasks-per-node=4
#SBATCH --gpus-per-node=4
#SBATCH -c 16
#SBATCH -t 00:30:00

module load env/release/2024.1
module load PyTorch/2.3.0-foss-2023a-CUDA-12.2.0

export MASTER_ADDR=localhost MASTER_PORT=29500
srun python train.py
