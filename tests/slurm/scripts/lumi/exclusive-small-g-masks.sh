#!/bin/bash
#SBATCH --account=project_465000000
#SBATCH --partition=small-g
#SBATCH --exclusive
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=8
#SBATCH --gpus-per-node=8
#SBATCH --cpus-per-task=7
#SBATCH --mem=480G
#SBATCH --time=2-00:00:00

module use /appl/local/containers/ai-modules
module load singularity-AI-bindings
SIF=/appl/local/containers/sif-images/lumi-pytorch-rocm-6.2.4-python-3.12-pytorch-v2.6.0.sif

srun --cpu-bind=map_cpu:49,57,17,25,1,9,33,41 singularity exec "$SIF" \
    bash -c 'export ROCR_VISIBLE_DEVICES=$SLURM_LOCALID; $WITH_CONDA && python train.py'
