#!/bin/bash
#SBATCH --job-name=ds-hostfile
#SBATCH --partition=gpu
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gres=gpu:4
#SBATCH --cpus-per-task=128
#SBATCH --time=08:00:00

module load Anaconda3
conda activate deepspeed

# DeepSpeed's own multi-node runner: one line per node in the hostfile, pdsh starts the node's processes
scontrol show hostnames "$SLURM_JOB_NODELIST" | sed 's/$/ slots=4/' > hostfile
deepspeed --hostfile hostfile --launcher pdsh --master_addr "$(hostname)" train.py --deepspeed ds_config.json
