#!/bin/bash
#SBATCH -A project_2001234
#SBATCH -p gpu
#SBATCH -N 1
#SBATCH -n 4
#SBATCH -c 10
#SBATCH -t 02:00:00
#SBATCH --mem=200G
#SBATCH --gres=gpu:v100:4

module purge
module load pytorch

export OMP_NUM_THREADS=$SLURM_CPUS_PER_TASK
srun python3 ddp_train.py
