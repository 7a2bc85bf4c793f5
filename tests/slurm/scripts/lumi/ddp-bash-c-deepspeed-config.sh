#!/bin/bash
#SBATCH --job-name=ds-ddp
#SBATCH --account=project_465000000
#SBATCH --partition=standard-g
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=8
#SBATCH --gpus-per-node=8
#SBATCH --cpus-per-task=7
#SBATCH --mem=480G
#SBATCH --time=12:00:00

module use /appl/local/containers/ai-modules
module load singularity-AI-bindings

SIF=/appl/local/containers/sif-images/lumi-pytorch-rocm-6.2.4-python-3.12-pytorch-v2.6.0.sif
export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
export MASTER_PORT=$((20000 + SLURM_JOB_ID % 10000))

# one Python process per GCD; ranks come from Slurm, DeepSpeed only reads them
srun singularity run "$SIF" bash -c 'export RANK=$SLURM_PROCID LOCAL_RANK=$SLURM_LOCALID WORLD_SIZE=$SLURM_NTASKS;
    export ROCR_VISIBLE_DEVICES=$SLURM_LOCALID;
    python train.py --deepspeed --deepspeed_config ds.json'
