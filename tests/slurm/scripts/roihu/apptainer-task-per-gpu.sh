#!/bin/bash
#SBATCH --account=project_2001234
#SBATCH --partition=gpumedium
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=4
#SBATCH --cpus-per-task=72
#SBATCH --time=08:00:00
#SBATCH --gres=gpu:gh200:4

SIF=/projappl/project_2001234/images/pytorch_2.10_cuda13_roihu.sif
export MASTER_ADDR=$(hostname)
export MASTER_PORT=29500

srun apptainer exec --nv -B /scratch/project_2001234 "$SIF" \
    env OMP_NUM_THREADS=8 PYTHONUNBUFFERED=1 python3 train.py
