#!/bin/bash
#SBATCH --account=project_465000000
#SBATCH --partition=small-g
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=4
#SBATCH --cpus-per-task=28
#SBATCH --mem=240G
#SBATCH --time=06:00:00

module purge
SIF=/appl/local/containers/sif-images/lumi-pytorch-rocm-6.2.4-python-3.12-pytorch-v2.6.0.sif
cd /scratch/project_465000000/alice/runs/exp7

srun singularity exec -B /scratch/project_465000000,/project/project_465000000 "$SIF" \
    torchrun --standalone --nproc-per-node=4 /project/project_465000000/alice/code/train.py --data /scratch/project_465000000/data
