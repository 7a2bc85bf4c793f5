#!/bin/bash
#SBATCH --job-name=mnist
#SBATCH --nodes=1
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=4
#SBATCH --mem-per-cpu=4G
#SBATCH --gres=gpu:1
#SBATCH --time=01:00:00

module purge
module load anaconda3/2024.6
conda activate torch-env

python mnist_classify.py --epochs=5
