#!/bin/bash
#SBATCH --job-name=uenv-ft
#SBATCH --account=a-a06
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=4
#SBATCH --gpus-per-task=1
#SBATCH --cpus-per-task=72
#SBATCH --time=00:30:00
#SBATCH --uenv=pytorch/v2.6.0:v1
#SBATCH --view=default

source ./venv-uenv/bin/activate
export MASTER_ADDR=$(hostname)
export MASTER_PORT=29500

srun --uenv=pytorch/v2.6.0:v1 --view=default python finetune.py --bf16
