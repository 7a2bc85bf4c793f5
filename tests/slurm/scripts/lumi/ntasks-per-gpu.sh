#!/bin/bash
#SBATCH --account=project_465000000
#SBATCH --partition=standard-g
#SBATCH --nodes=1
#SBATCH --gpus-per-node=8
#SBATCH --ntasks-per-gpu=1
#SBATCH --cpus-per-task=7
#SBATCH --mem=480G
#SBATCH --time=05:00:00

module use /appl/local/containers/ai-modules
module load singularity-AI-bindings
SIF=/appl/local/containers/sif-images/lumi-pytorch-rocm-6.2.4-python-3.12-pytorch-v2.6.0.sif

srun singularity exec "$SIF" bash -c '$WITH_CONDA && python train.py'
