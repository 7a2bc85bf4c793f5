#!/bin/bash
#SBATCH --account=project_2001234
#SBATCH --partition=gpu
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=4
#SBATCH --cpus-per-task=10
#SBATCH --mem-per-gpu=90G
#SBATCH --time=12:00:00
#SBATCH --gres=gpu:v100:4

module purge
module load pytorch

# Lightning's SLURMEnvironment: one task per GPU, Trainer(devices=4, num_nodes=2)
srun python3 lightning_train.py --devices 4 --num-nodes 2
