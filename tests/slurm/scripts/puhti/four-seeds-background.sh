#!/bin/bash
#SBATCH --account=project_2001234
#SBATCH --partition=gpu
#SBATCH --nodes=1
#SBATCH --ntasks=4
#SBATCH --cpus-per-task=10
#SBATCH --mem=300G
#SBATCH --time=12:00:00
#SBATCH --gres=gpu:v100:4

module purge
module load pytorch

# four independent single-GPU runs side by side, one GPU and one task each
for seed in 1 2 3 4; do
    srun --ntasks=1 --exact --gres=gpu:v100:1 --cpus-per-task=10 python3 train.py --seed "$seed" &
done
wait
