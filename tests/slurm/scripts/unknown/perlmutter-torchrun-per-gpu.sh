#!/bin/bash
#SBATCH -A m4321_g
#SBATCH -C gpu
#SBATCH -q regular
#SBATCH -t 04:00:00
#SBATCH -N 1
#SBATCH --ntasks-per-node=4
#SBATCH -c 32
#SBATCH --gpus-per-node=4

module load pytorch/2.6.0

srun torchrun --standalone --nproc_per_node=4 train.py
