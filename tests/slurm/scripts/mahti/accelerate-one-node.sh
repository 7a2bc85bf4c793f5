#!/bin/bash
#SBATCH --account=project_2001234
#SBATCH --partition=gpumedium
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=128
#SBATCH --time=06:00:00
#SBATCH --gres=gpu:a100:4

module purge
module load pytorch

export HF_HOME=/scratch/project_2001234/hf-cache
srun accelerate launch --multi_gpu --num_processes=4 --num_machines=1 sft.py --config sft.yaml
