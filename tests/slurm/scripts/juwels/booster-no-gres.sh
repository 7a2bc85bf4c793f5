#!/bin/bash
#SBATCH --account=training2426
#SBATCH --partition=booster
#SBATCH --nodes=1
#SBATCH --ntasks=1
#SBATCH --time=06:00:00
#SBATCH --output=finetune-%j.out

module load Stages/2025 GCC Python
source venv/bin/activate

srun python finetune.py --model llama-3b --epochs 2
