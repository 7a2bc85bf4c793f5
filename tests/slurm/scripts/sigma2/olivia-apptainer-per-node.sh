#!/bin/bash
#SBATCH --account=nn9999k
#SBATCH --job-name=ddp_container
#SBATCH --time=02:00:00
#SBATCH --partition=accel
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=4
#SBATCH --cpus-per-task=72
#SBATCH --mem=440G

set -euo pipefail
SIF=/cluster/work/projects/nn9999k/containers/pytorch_25.04-py3.sif
mapfile -t hosts < <(scontrol show hostnames "$SLURM_JOB_NODELIST")

srun apptainer exec --nv -B /cluster/work/projects/nn9999k "$SIF" \
    torchrun --nnodes="$SLURM_JOB_NUM_NODES" --nproc_per_node=4 --rdzv_backend=c10d \
    --rdzv_endpoint="${hosts[0]}:29500" --rdzv_id="$SLURM_JOB_ID" train_ddp.py
