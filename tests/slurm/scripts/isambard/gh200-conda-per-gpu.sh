#!/bin/bash
#SBATCH --job-name=gh200-ddp
#SBATCH --nodes=1
#SBATCH --gpus=4
#SBATCH --ntasks-per-gpu=1
#SBATCH --cpus-per-task=72
#SBATCH --time=06:00:00
#SBATCH --output=%x.%j.out

source ~/miniforge3/bin/activate
conda activate pytorch-aarch64

export MASTER_ADDR=$(hostname)
export MASTER_PORT=29500
srun python train.py --compile
