#!/bin/bash
#SBATCH --account=project_2001234
#SBATCH --partition=gpumedium
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=128
#SBATCH --time=1-12:00:00
#SBATCH --gres=gpu:a100:4

module purge
module load pytorch

export RDZV_HOST=$(hostname)
export RDZV_PORT=29400
srun torchrun --nnodes=$SLURM_JOB_NUM_NODES --nproc_per_node=4 \
    --rdzv_id=$SLURM_JOB_ID --rdzv_backend=c10d --rdzv_endpoint="$RDZV_HOST:$RDZV_PORT" \
    multinode_train.py --epochs 90
