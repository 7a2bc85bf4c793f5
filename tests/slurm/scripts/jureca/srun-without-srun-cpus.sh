#!/bin/bash
#SBATCH --account=training2546
#SBATCH --partition=dc-gpu
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=4
#SBATCH --cpus-per-task=32
#SBATCH --gres=gpu:4
#SBATCH --time=06:00:00

export CUDA_VISIBLE_DEVICES=0,1,2,3
export MASTER_ADDR="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)i"
export MASTER_PORT=29500
source .venv/bin/activate

srun python train.py --num-workers 16
