#!/bin/bash
#SBATCH --account=training2426
#SBATCH --partition=booster
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=4
#SBATCH --cpus-per-task=24
#SBATCH --gres=gpu:4
#SBATCH --time=03:00:00

export CUDA_VISIBLE_DEVICES=0,1,2,3
export MASTER_ADDR="$(hostname)i" MASTER_PORT=29500
source sc_venv_template/activate.sh

srun --cpus-per-task="$SLURM_CPUS_PER_TASK" --cpu-bind=none python -u train.py
