#!/bin/bash
#SBATCH --account=project_2001234
#SBATCH --partition=gpu
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=4
#SBATCH --cpus-per-task=10
#SBATCH --mem=320G
#SBATCH --time=08:00:00
#SBATCH --gres=gpu:v100:4

module use /appl/soft/ai/singularity/modulefiles/
module load nvidia-pytorch/23.05-py3

srun singularity_wrapper exec torchrun --standalone --nproc_per_node=4 train.py
