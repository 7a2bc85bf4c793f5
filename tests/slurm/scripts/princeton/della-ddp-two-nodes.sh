#!/bin/bash
#SBATCH --job-name=ddp-torch
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=2
#SBATCH --cpus-per-task=8
#SBATCH --mem=64G
#SBATCH --gres=gpu:2
#SBATCH --constraint=gpu80
#SBATCH --time=00:20:00
#SBATCH --mail-type=begin
#SBATCH --mail-type=end
#SBATCH --mail-user=someone@princeton.edu

export MASTER_PORT=$(expr 10000 + $(echo -n $SLURM_JOBID | tail -c 4))
export WORLD_SIZE=$(($SLURM_NNODES * $SLURM_NTASKS_PER_NODE))
echo "WORLD_SIZE="$WORLD_SIZE

master_addr=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
export MASTER_ADDR=$master_addr

module purge
module load anaconda3/2024.6
conda activate torch-env

srun python mnist_ddp.py --epochs=2
