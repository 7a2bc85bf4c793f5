#!/bin/bash
#SBATCH --job-name=gpt-pretrain
#SBATCH --account=bsc70
#SBATCH --qos=acc_bscls
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gres=gpu:4
#SBATCH --cpus-per-task=80
#SBATCH --time=2-00:00:00
#SBATCH --output=logs/%x_%j.out

module purge
module load mkl/2024.0 nvidia-hpc-sdk/23.11 python/3.12.1
source /gpfs/projects/bsc70/envs/llm/bin/activate

MASTER=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
export NCCL_IB_HCA=mlx5

srun --kill-on-bad-exit=1 torchrun --nnodes 2 --nproc_per_node 4 --rdzv_backend c10d \
    --rdzv_endpoint "$MASTER:29400" pretrain.py --tp 4 --pp 2
