#!/bin/bash
#SBATCH --account=project_465000000
#SBATCH --partition=dev-g
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=7
#SBATCH --gpus-per-task=1
#SBATCH --mem=60G
#SBATCH --time=0:30:00

module use /appl/local/containers/ai-modules
module load singularity-AI-bindings

SIF=/scratch/project_465000000/resources/lumi-pytorch-rocm-6.2.4-python-3.12-pytorch-v2.6.0.sif
export SINGULARITYENV_PREPEND_PATH=/user-software/bin

srun singularity exec "$SIF" bash -c '$WITH_CONDA; source /scratch/project_465000000/venvs/cifar/bin/activate; python train_cifar100.py'
