#!/bin/bash
#SBATCH --account=project_465000000
#SBATCH --partition=standard-g
#SBATCH --nodes=2
#SBATCH --gpus-per-node=8
#SBATCH --time=04:00:00

# envrun binds the program's directory read-only itself when it lies outside the binds
envrun --image /scratch/project_465000000/images/lumi-pytorch.sif srun torchrun /users/alice/experiments/sweep/train.py --lr 3e-4
