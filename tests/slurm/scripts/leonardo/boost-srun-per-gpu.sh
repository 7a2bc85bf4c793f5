#!/bin/bash
#SBATCH --job-name=vit-ddp
#SBATCH --account=AIFAC_L01_028
#SBATCH --partition=boost_usr_prod
#SBATCH --qos=boost_qos_dbg
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=4
#SBATCH --gres=gpu:4
#SBATCH --cpus-per-task=8
#SBATCH --mem=0
#SBATCH --time=00:30:00
#SBATCH --output=%x-%j.out

module load profile/deeplrn
module load cineca-ai/4.3.0

# compute nodes have no internet: offline Hugging Face
export HF_HUB_OFFLINE=1
export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
export MASTER_PORT=12345

srun --cpu-bind=cores python train_vit.py --batch-size 128 --data "$FAST/imagenet"
