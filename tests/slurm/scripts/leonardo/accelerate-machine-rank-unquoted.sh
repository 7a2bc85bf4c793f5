#!/bin/bash
#SBATCH --job-name=llm-ft
#SBATCH --account=AIFAC_L01_028
#SBATCH --partition=boost_usr_prod
#SBATCH --nodes=4
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=4
#SBATCH --cpus-per-task=32
#SBATCH --time=1-00:00:00

module load profile/deeplrn cineca-ai/4.3.0
source $WORK/venvs/ft/bin/activate

head_node=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)

srun accelerate launch --num_machines $SLURM_NNODES --num_processes 16 --machine_rank $SLURM_NODEID --main_process_ip $head_node --main_process_port 29500 finetune.py
