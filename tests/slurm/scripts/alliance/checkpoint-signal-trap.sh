#!/bin/bash
#SBATCH --account=def-someprof
#SBATCH --gpus-per-node=v100l:1
#SBATCH --cpus-per-task=6
#SBATCH --mem=32G
#SBATCH --time=0-23:00
#SBATCH --signal=B:USR1@300

module load python/3.11 cuda/12.2
source ~/envs/torch/bin/activate

# ask the trainer to checkpoint, then requeue the job, 5 minutes before the time limit
checkpoint_and_requeue() {
    echo "USR1 at $(date): checkpointing"
    kill -USR1 "$TRAIN_PID"
    wait "$TRAIN_PID"
    scontrol requeue "$SLURM_JOB_ID"
}
trap checkpoint_and_requeue USR1

python train.py --resume-from "$SCRATCH/ckpt/latest.pt" &
TRAIN_PID=$!
wait "$TRAIN_PID"
