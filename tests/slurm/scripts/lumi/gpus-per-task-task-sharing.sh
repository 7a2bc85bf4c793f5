#!/bin/bash
#SBATCH --account=project_465000000
#SBATCH --partition=standard-g
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=8
#SBATCH --gpus-per-task=1
#SBATCH --cpus-per-task=7
#SBATCH --mem=480G
#SBATCH --time=01:00:00

module use /appl/local/laifs/modules
module load lumi-aif-singularity-bindings
SIF=/appl/local/laifs/containers/lumi-multitorch-u24r70f21m50t210-20260415_130625/lumi-multitorch-full-u24r70f21m50t210-20260415_130625.sif
export MASTER_ADDR=$(hostname)
export MASTER_PORT=29500

srun --gpu-bind=map:4,5,2,3,6,7,0,1 --gres-flags=allow-task-sharing \
    singularity run "$SIF" bash -c 'export RANK=$SLURM_PROCID LOCAL_RANK=$SLURM_LOCALID WORLD_SIZE=$SLURM_NTASKS; python train.py'
