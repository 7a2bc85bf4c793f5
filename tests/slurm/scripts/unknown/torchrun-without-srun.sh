#!/bin/bash
#SBATCH --job-name=gpt-2node
#SBATCH --partition=gpu
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=32
#SBATCH --gres=gpu:4
#SBATCH --time=12:00:00

source ~/venvs/gpt/bin/activate
head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
torchrun --nnodes=2 --nproc_per_node=4 --rdzv_backend=c10d --rdzv_endpoint=$head:29500 train_gpt.py
