#!/bin/bash
#SBATCH --job-name=pretrain
#SBATCH --account=a-a06
#SBATCH --nodes=4
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=4
#SBATCH --time=12:00:00
#SBATCH --signal=B:USR1@300

EDF=$HOME/.edf/megatron.toml
head=$(scontrol show hostnames $SLURM_JOB_NODELIST | head -n 1)

on_usr1() {
    echo "time is nearly up: forwarding to the step"
    kill -USR1 "$step" 2>/dev/null
}
trap on_usr1 USR1

srun --environment=$EDF --cpus-per-task=288 torchrun --nnodes=$SLURM_NNODES --nproc_per_node=4 \
    --rdzv_backend=c10d --rdzv_endpoint=$head:29500 pretrain_gpt.py --save $SCRATCH/ckpt &
step=$!
wait $step
