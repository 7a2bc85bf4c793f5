#!/bin/bash
#SBATCH --account=training2426
#SBATCH --partition=booster
#SBATCH --nodes=4
#SBATCH --ntasks-per-node=4
#SBATCH --cpus-per-task=24
#SBATCH --gres=gpu:4
#SBATCH --time=08:00:00

module load Stages/2025 GCC OpenMPI PyTorch
export CUDA_VISIBLE_DEVICES=0,1,2,3
MASTER_ADDR="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)i"
export MASTER_ADDR MASTER_PORT=29500

srun --cpu-bind=none python -u train.py --num-workers 20
