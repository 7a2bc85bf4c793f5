#!/bin/bash
#SBATCH --account=project_2001234
#SBATCH --partition=gpusmall
#SBATCH --array=0-9
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=32
#SBATCH --time=04:00:00
#SBATCH --gres=gpu:a100:1
#SBATCH --output=sweep_%A_%a.out

module purge
module load pytorch

LRS=(1e-5 3e-5 1e-4 3e-4 1e-3 3e-3 1e-2 3e-2 1e-1 3e-1)
srun python3 finetune.py --lr "${LRS[$SLURM_ARRAY_TASK_ID]}"
