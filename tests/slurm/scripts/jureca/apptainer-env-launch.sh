#!/bin/bash
#SBATCH --account=training2546
#SBATCH --partition=dc-gpu
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=4
#SBATCH --cpus-per-task=32
#SBATCH --gres=gpu:4
#SBATCH --time=03:00:00

export SRUN_CPUS_PER_TASK="$SLURM_CPUS_PER_TASK"
export MASTER_ADDR="$(hostname)i" MASTER_PORT=29500
module load Stages/2025 Apptainer-Tools

srun env PYTHONUNBUFFERED=1 apptainer exec --nv pytorch-24.09.sif python -u train.py
