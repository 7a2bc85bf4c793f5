#!/bin/bash
#SBATCH --job-name=bert-pretrain
#SBATCH --account=project_465000000
#SBATCH --time=14:00:00
#SBATCH --cpus-per-task=7
#SBATCH --mem-per-gpu=60G
#SBATCH --nodes=4
#SBATCH --ntasks-per-node=8
#SBATCH --gpus-per-node=mi250:8
#SBATCH --partition=standard-g
#SBATCH --hint=nomultithread
#SBATCH --output=logs/bert-%j.out

module use /appl/local/containers/ai-modules
module load singularity-AI-bindings
export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
export MASTER_PORT=9999

srun singularity exec /scratch/project_465000000/images/hplt.sif \
    bash -c 'export LOCAL_RANK=$SLURM_LOCALID RANK=$SLURM_PROCID WORLD_SIZE=$SLURM_NTASKS; python3 pretrain_bert.py --config bert-base.yaml'
