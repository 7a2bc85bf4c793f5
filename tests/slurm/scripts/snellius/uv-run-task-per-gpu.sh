#!/bin/bash
#SBATCH -J uv-ddp
#SBATCH -p gpu_h100
#SBATCH -N 2
#SBATCH --ntasks-per-node=4
#SBATCH --gpus-per-node=4
#SBATCH -c 16
#SBATCH -t 08:00:00

export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
export MASTER_PORT=$(( 10000 + SLURM_JOB_ID % 50000 ))
export UV_CACHE_DIR=$TMPDIR/uv-cache

srun uv run --frozen --project "$HOME/proj" python -m proj.train --nodes "$SLURM_NNODES"
