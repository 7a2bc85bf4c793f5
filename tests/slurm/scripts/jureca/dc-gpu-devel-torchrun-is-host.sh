#!/bin/bash
#SBATCH --account=training2546
#SBATCH --partition=dc-gpu-devel
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=128
#SBATCH --gres=gpu:4
#SBATCH --time=00:45:00

export SRUN_CPUS_PER_TASK="$SLURM_CPUS_PER_TASK"
MASTER_ADDR="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)i"
source .venv/bin/activate

srun --cpu-bind=none bash -c "torchrun --nnodes=2 --nproc_per_node=4 --rdzv_id=$SLURM_JOB_ID \
    --rdzv_conf=is_host=\$(( SLURM_NODEID == 0 ? 1 : 0 )) --rdzv_backend=c10d \
    --rdzv_endpoint=$MASTER_ADDR:29500 train.py"
