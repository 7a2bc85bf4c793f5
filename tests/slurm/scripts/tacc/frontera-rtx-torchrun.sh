#!/bin/bash
#SBATCH -J bert-ft
#SBATCH -p rtx
#SBATCH -N 1
#SBATCH -n 1
#SBATCH -t 08:00:00
#SBATCH -A TRA24001

module load cuda/12.2 python3/3.9.2
source $HOME/envs/bert/bin/activate

# one node, 4 RTX 5000: torchrun starts the 4 processes itself
torchrun --standalone --nproc_per_node=4 finetune.py --model bert-base-uncased
