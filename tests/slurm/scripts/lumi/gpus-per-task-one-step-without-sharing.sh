#!/bin/bash
#SBATCH --account=project_465000000
#SBATCH --partition=standard-g
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=8
#SBATCH --gpus-per-task=1
#SBATCH --cpus-per-task=7
#SBATCH --mem=480G
#SBATCH --time=01:00:00

SIF=/appl/local/laifs/containers/lumi-multitorch-u24r70f21m50t210-20260415_130625/lumi-multitorch-full-u24r70f21m50t210-20260415_130625.sif
export MASTER_ADDR=$(hostname)
export MASTER_PORT=29500

# a warm-up step in the new form, then the training step without allow-task-sharing
srun --gpu-bind=map:4,5,2,3,6,7,0,1 --gres-flags=allow-task-sharing singularity run "$SIF" python warmup.py
srun singularity run "$SIF" bash -c 'export RANK=$SLURM_PROCID LOCAL_RANK=$SLURM_LOCALID WORLD_SIZE=$SLURM_NTASKS; python train.py'
