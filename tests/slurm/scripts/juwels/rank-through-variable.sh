#!/bin/bash
#SBATCH --account=training2426
#SBATCH --partition=booster
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=4
#SBATCH --cpus-per-task=24
#SBATCH --gres=gpu:4
#SBATCH --time=03:00:00

source sc_venv_template/activate.sh
MASTER_ADDR="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"
export MASTER_ADDR="${MASTER_ADDR}i"
export MASTER_PORT=29500

GLOBAL_RANK=$SLURM_PROCID
export RANK=$GLOBAL_RANK
export LOCAL_RANK=${SLURM_LOCALID:-0}

srun --cpus-per-task="$SLURM_CPUS_PER_TASK" --cpu-bind=none python -u train.py
