#!/bin/bash
#SBATCH --account=<project_number>
#SBATCH --job-name=resnet_multinode
#SBATCH --output=multinode_%j.out
#SBATCH --time=01:00:00
#SBATCH --partition=accel
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=4
#SBATCH --cpus-per-task=72
#SBATCH --mem=440G

set -euo pipefail
ml reset
ml load NRIS/GPU
ml use /cluster/work/support/pytorch_module
ml load PyTorch/2.8.0

# the first node of the job is the rendezvous host
mapfile -t hosts < <(scontrol show hostnames "${SLURM_JOB_NODELIST}")
export RDZV_ENDPOINT="${hosts[0]}:29500"

srun torchrun --nnodes="${SLURM_JOB_NUM_NODES}" --nproc_per_node="${SLURM_GPUS_ON_NODE}" \
    --rdzv_id="${SLURM_JOB_ID}" --rdzv_backend=c10d --rdzv_endpoint="${RDZV_ENDPOINT}" \
    train_ddp.py --epochs 50
