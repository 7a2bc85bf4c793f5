#!/bin/bash
#SBATCH --job-name=llm-acc
#SBATCH -A abc@a100
#SBATCH -C a100
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gres=gpu:8
#SBATCH --cpus-per-task=64
#SBATCH --hint=nomultithread
#SBATCH --time=10:00:00

module purge
module load arch/a100 pytorch-gpu/py3/2.3.0

# IDRIS's wrapper fills in accelerate's machine rank, address and process counts from Slurm
srun idr_accelerate --config_file configs/fsdp.yaml --mixed_precision bf16 train_llm.py --epochs 2
