#!/bin/bash
#SBATCH --account=project_465000000
#SBATCH --partition=small-g
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=2
#SBATCH --cpus-per-task=14
#SBATCH --mem=120G
#SBATCH --time=08:00:00

module use /appl/local/containers/ai-modules
module load singularity-AI-bindings
SIF=/appl/local/containers/sif-images/lumi-pytorch-rocm-6.2.4-python-3.12-pytorch-v2.6.0.sif

<<<<<<< HEAD
export HF_HOME=/flash/project_465000000/hf-cache
=======
export HF_HOME=/scratch/project_465000000/hf-cache
>>>>>>> tune-lr
srun singularity exec "$SIF" bash -c '$WITH_CONDA && torchrun --standalone --nproc-per-node=2 train.py'
