#!/bin/bash
#SBATCH --account=project_465000000
#SBATCH --partition=standard-g
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=8
#SBATCH --gpus-per-node=8
#SBATCH --cpus-per-task=7
#SBATCH --mem=480G
#SBATCH --time=03:00:00

module use /appl/local/containers/ai-modules
module load singularity-AI-bindings
: "${CMD:?give the step, e.g. sbatch --export=ALL,CMD='singularity exec app.sif python train.py' job.sh}"

srun $CMD
