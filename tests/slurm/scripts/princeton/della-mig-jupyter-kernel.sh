#!/bin/bash
#SBATCH --job-name=mig-infer
#SBATCH --nodes=1
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=2
#SBATCH --mem=16G
#SBATCH --gres=gpu:1
#SBATCH --partition=mig
#SBATCH --time=00:59:00

module purge
module load anaconda3/2024.6
conda activate vllm-env

# one MIG slice: a single process on the one GPU it sees
srun python -m vllm.entrypoints.offline_batch --model "$HOME/models/llama-3-8b" --input prompts.jsonl
