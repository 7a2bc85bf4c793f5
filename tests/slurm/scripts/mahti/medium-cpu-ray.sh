#!/bin/bash
#SBATCH --job-name=ray-tune-cpu
#SBATCH --account=project_2001234
#SBATCH --partition=medium
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=128
#SBATCH --time=12:00:00

module load python-data

head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
srun --nodes=1 --ntasks=1 -w "$head" ray start --head --port=6379 --num-cpus=128 --block &
sleep 20
srun --nodes=1 --ntasks=1 --exclude="$head" ray start --address="$head:6379" --num-cpus=128 --block &
sleep 20
python3 tune_hyperparameters.py --address "$head:6379"
