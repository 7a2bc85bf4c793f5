#!/bin/bash
#SBATCH --job-name=lr-sweep
#SBATCH --partition=kempner_requeue
#SBATCH --account=kempner_lab
#SBATCH --array=0-15%4
#SBATCH --nodes=1
#SBATCH --ntasks=1
#SBATCH --gpus-per-node=1
#SBATCH --cpus-per-task=16
#SBATCH --mem=64G
#SBATCH --time=02:00:00
#SBATCH --requeue

LRS=(1e-4 3e-4 1e-3 3e-3)
WDS=(0.0 0.01 0.05 0.1)
lr=${LRS[$(( SLURM_ARRAY_TASK_ID / 4 ))]}
wd=${WDS[$(( SLURM_ARRAY_TASK_ID % 4 ))]}

conda activate sweeps
python train.py --lr "$lr" --weight-decay "$wd" --out "runs/${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}"

# the last task of the array submits the summary once all are done
if [[ $SLURM_ARRAY_TASK_ID -eq $SLURM_ARRAY_TASK_MAX ]]; then
    sbatch --dependency=afterany:${SLURM_ARRAY_JOB_ID} summarize.sh
fi
