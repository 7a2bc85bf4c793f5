#!/bin/bash
#SBATCH --account=training2426
#SBATCH --partition=develbooster
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=96
#SBATCH --gres=gpu:4
#SBATCH --time=01:00:00

export SRUN_CPUS_PER_TASK="$SLURM_CPUS_PER_TASK"
source .venv/bin/activate

srun bash -c 'accelerate launch --num_processes 4 --num_machines 1 --main_process_port 29500 train_lora.py'
