#!/bin/bash
#SBATCH --job-name=ddp-h100
#SBATCH -A abc@h100
#SBATCH -C h100
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=4
#SBATCH --gres=gpu:4
#SBATCH --cpus-per-task=24
#SBATCH --hint=nomultithread
#SBATCH --time=20:00:00
#SBATCH --qos=qos_gpu_h100-t3
#SBATCH --output=ddp%j.out

module purge
module load arch/h100
module load pytorch-gpu/py3/2.4.0
set -x

# one task per GPU; idr_torch reads the ranks from Slurm's variables
srun python -u train.py --batch-size 512
