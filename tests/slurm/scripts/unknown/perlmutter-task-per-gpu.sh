#!/bin/bash
#SBATCH -A m4321_g
#SBATCH -C gpu
#SBATCH -q regular
#SBATCH -t 02:00:00
#SBATCH -N 2
#SBATCH --ntasks-per-node=4
#SBATCH -c 32
#SBATCH --gpus-per-node=4

module load pytorch/2.6.0
export MASTER_ADDR=$(hostname)
export MASTER_PORT=29507

srun python train.py --config configs/unet.yaml
