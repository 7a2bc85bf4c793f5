#!/bin/bash
#SBATCH --job-name=fsdp
#SBATCH --partition=kempner
#SBATCH --account=kempner_lab
#SBATCH --constraint="a100|h100"
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=4
#SBATCH --gres=gpu:4
#SBATCH --cpus-per-task=16
#SBATCH --mem=0
#SBATCH --time=12:00:00
#SBATCH --exclusive

source ~/.bashrc
mamba activate fsdp

export MASTER_ADDR=$(scontrol show hostnames $SLURM_JOB_NODELIST | head -n 1)
export MASTER_PORT=$(( 20000 + SLURM_JOB_ID % 10000 ))
export WORLD_SIZE=$(( SLURM_NNODES * SLURM_NTASKS_PER_NODE ))

# Slurm starts one task per GPU; each reads RANK and LOCAL_RANK from SLURM_PROCID and SLURM_LOCALID
srun --cpu-bind=cores python -u fsdp_train.py --model-size 7b
