#!/bin/bash
#SBATCH --account=project_465000000
#SBATCH --partition=standard-g
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-task=8
#SBATCH --cpus-per-task=56
#SBATCH --mem=480G
#SBATCH --time=2:00:00

module use /appl/local/containers/ai-modules
module load singularity-AI-bindings

SIF=/appl/local/containers/sif-images/lumi-pytorch-rocm-6.2.4-python-3.12-pytorch-v2.6.0.sif
export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
export NCCL_SOCKET_IFNAME=hsn0,hsn1,hsn2,hsn3

srun singularity exec "$SIF" bash -c "\$WITH_CONDA && torchrun --nnodes=$SLURM_JOB_NUM_NODES --nproc-per-node=8 \
    --rdzv-id=$SLURM_JOB_ID --rdzv-backend=c10d --rdzv-endpoint=$MASTER_ADDR:29500 train.py"
