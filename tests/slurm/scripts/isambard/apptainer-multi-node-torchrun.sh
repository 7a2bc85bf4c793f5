#!/bin/bash
#SBATCH --job-name=mn-torchrun
#SBATCH --nodes=4
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=4
#SBATCH --cpus-per-task=288
#SBATCH --time=12:00:00

module load brics/apptainer-multi-node
head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)

srun apptainer exec --nv $HOME/images/ngc-pytorch-25.01-arm64.sif \
    torchrun --nnodes=$SLURM_NNODES --nproc_per_node=4 --rdzv_backend=c10d \
    --rdzv_endpoint=$head:29500 --rdzv_id=$SLURM_JOB_ID train.py
