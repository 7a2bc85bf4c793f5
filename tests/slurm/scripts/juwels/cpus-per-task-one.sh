#!/bin/bash
#SBATCH --account=training2426
#SBATCH --partition=develbooster
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=4
#SBATCH --cpus-per-task=1
#SBATCH --gres=gpu:4
#SBATCH --time=00:20:00

module load Stages/2025 GCC OpenMPI PyTorch
export CUDA_VISIBLE_DEVICES=0,1,2,3
export MASTER_ADDR="$(hostname)i"
export MASTER_PORT=29500

srun python -u allreduce_bench.py
