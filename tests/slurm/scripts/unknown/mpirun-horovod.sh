#!/bin/bash
#SBATCH --job-name=horovod
#SBATCH --partition=gpu
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=4
#SBATCH --gres=gpu:4
#SBATCH --time=05:00:00

module load OpenMPI/4.1.5 Horovod
mpirun -np $SLURM_NTASKS -bind-to none -map-by slot -x NCCL_DEBUG=INFO python train_hvd.py
