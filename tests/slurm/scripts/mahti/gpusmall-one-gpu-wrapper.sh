#!/bin/bash
#SBATCH --account=project_2001234
#SBATCH --partition=gpusmall
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=32
#SBATCH --time=1-00:00:00
#SBATCH --gres=gpu:a100:1,nvme:100

module purge
module load pytorch/2.4

tar -xf /scratch/project_2001234/data/images.tar -C "$LOCAL_SCRATCH"
srun apptainer_wrapper exec python3 train.py --data "$LOCAL_SCRATCH/images"
