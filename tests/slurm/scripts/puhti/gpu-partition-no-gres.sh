#!/bin/bash
#SBATCH --job-name=bert-finetune
#SBATCH --account=project_2001234
#SBATCH --partition=gpu
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=10
#SBATCH --mem=64G
#SBATCH --time=10:00:00

module purge
module load pytorch

srun python3 finetune_bert.py --device cuda
