#!/bin/bash
#SBATCH -A m4431_g
#SBATCH -C gpu
#SBATCH -q regular
#SBATCH -t 01:00:00
#SBATCH -N 1
#SBATCH --ntasks-per-node=4
#SBATCH --gpus-per-task=1
#SBATCH -c 32

export MASTER_ADDR=$(hostname)
export MASTER_PORT=29500
srun podman-hpc run --rm --gpu --mpi -v "$PSCRATCH:/scratch" -w /workspace \
    registry.nersc.gov/myproject/torch:1.0 python /workspace/train.py --data /scratch/imagenet
