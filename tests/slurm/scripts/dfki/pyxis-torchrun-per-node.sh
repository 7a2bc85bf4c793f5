#!/bin/bash
#SBATCH --job-name=pyxis-torchrun
#SBATCH --partition=A100-80GB
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=8
#SBATCH --cpus-per-task=64
#SBATCH --time=2-00:00:00

head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
srun -K --container-image=/netscratch/enroot/nvcr.io_nvidia_pytorch_24.05-py3.sqsh \
     --container-mounts=/netscratch:/netscratch --container-workdir=/netscratch/$USER/proj \
     torchrun --nnodes=2 --nproc_per_node=8 --rdzv_backend=c10d --rdzv_endpoint=$head:29500 train.py
