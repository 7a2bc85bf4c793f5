#!/bin/bash
#SBATCH --job-name=vega-ddp
#SBATCH --partition=gpu
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=4
#SBATCH --gres=gpu:4
#SBATCH --cpus-per-task=32
#SBATCH --mem-per-gpu=60G
#SBATCH --time=04:00:00

export MASTER_ADDR=$(scontrol show hostnames $SLURM_JOB_NODELIST | head -n1)
export MASTER_PORT=29500
srun singularity exec --nv /ceph/hpc/data/containers/pytorch.sif python train.py --amp
