#!/bin/bash
#SBATCH --account=rrg-someprof
#SBATCH --array=1-10
#SBATCH --gres=gpu:1
#SBATCH --cpus-per-task=8
#SBATCH --mem=32G
#SBATCH --time=03:00:00
#SBATCH --output=seed-%A_%a.out

module load python/3.11 arrow/17.0.0
source ~/envs/rl/bin/activate

python ppo.py --seed "$SLURM_ARRAY_TASK_ID" --env HalfCheetah-v4
