#!/bin/bash
#SBATCH --account=project_2001234
#SBATCH --partition=gpu
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=4
#SBATCH --cpus-per-task=10
#SBATCH --mem=300G
#SBATCH --time=16:00:00
#SBATCH --gres=gpu:v100:4

module purge
module load pytorch

srun -l -u --kill-on-bad-exit=1 python3 train.py --epochs 30 | tee train-$SLURM_JOB_ID.log
