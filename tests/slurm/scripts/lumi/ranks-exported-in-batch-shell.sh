#!/bin/bash
#SBATCH --account=project_465000000
#SBATCH --partition=standard-g
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=8
#SBATCH --gpus-per-node=8
#SBATCH --cpus-per-task=7
#SBATCH --mem=480G
#SBATCH --time=02:00:00

module use /appl/local/laifs/modules
module load lumi-aif-singularity-bindings
SIF=/appl/local/laifs/containers/lumi-multitorch-u24r70f21m50t210-20260415_130625/lumi-multitorch-full-u24r70f21m50t210-20260415_130625.sif

export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
export MASTER_PORT="1${SLURM_JOB_ID:0-4}"
# the ranks for torch.distributed's env:// init, set here once for all tasks
export RANK=$SLURM_PROCID LOCAL_RANK=$SLURM_LOCALID WORLD_SIZE=$SLURM_NTASKS

srun --cpus-per-task=7 --gpu-bind=map:4,5,2,3,6,7,0,1 --gres-flags=allow-task-sharing \
    singularity run "$SIF" python train.py
