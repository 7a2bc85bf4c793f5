#!/bin/bash -x
#SBATCH --account hai_molbind     # the budget that pays
#SBATCH --time 12:00:00
#SBATCH --cpus-per-task 24        # 12 cores, 24 threads per task
#SBATCH --ntasks-per-node 4       # one task per GPU
#SBATCH --nodes 2
#SBATCH --partition booster
#SBATCH --gres gpu:4

export SRUN_CPUS_PER_TASK=${SLURM_CPUS_PER_TASK}
export CUDA_VISIBLE_DEVICES=0,1,2,3
MASTER_ADDR="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)i"
export MASTER_ADDR MASTER_PORT=23456
source env/activate.sh

srun python -u train_molbind.py --gpus-per-node 4 --num-nodes 2
