#!/usr/bin/env bash
set -euo pipefail
#SBATCH --job-name=llm-eval
#SBATCH --partition=gpu
#SBATCH --nodes=1
#SBATCH --gpus=2
#SBATCH --cpus-per-task=16
#SBATCH --time=03:00:00

source "$HOME/miniforge3/etc/profile.d/conda.sh"
conda activate eval
python run_eval.py --tasks hellaswag,arc_easy --batch-size 16
