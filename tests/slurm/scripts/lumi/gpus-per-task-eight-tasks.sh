#!/bin/bash
#SBATCH --account=project_465000000
#SBATCH --partition=standard-g
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=8
#SBATCH --gpus-per-task=1
#SBATCH --cpus-per-task=7
#SBATCH --mem=480G
#SBATCH --time=06:00:00

module use /appl/local/containers/ai-modules
module load singularity-AI-bindings
SIF=/appl/local/containers/sif-images/lumi-pytorch-rocm-6.2.4-python-3.12-pytorch-v2.6.0.sif
export MASTER_ADDR=$(hostname)

srun singularity exec "$SIF" bash -c '$WITH_CONDA && RANK=$SLURM_PROCID LOCAL_RANK=$SLURM_LOCALID python train.py'
