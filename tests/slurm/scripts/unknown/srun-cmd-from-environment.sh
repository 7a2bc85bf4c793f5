#!/bin/bash
#SBATCH --account=EUHPC_D12_345
#SBATCH --partition=boost_usr_prod
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=4
#SBATCH --cpus-per-task=8
#SBATCH --gres=gpu:4
#SBATCH --time=01:00:00

module load profile/deeplrn cineca-ai
CMD=${CMD:-$1}

srun $CMD
