#!/bin/bash
#SBATCH -A AIFAC_L01_028
#SBATCH -p boost_usr_prod
#SBATCH -N 1
#SBATCH --ntasks-per-node=4
#SBATCH --gres=gpu:4
#SBATCH -c 8
#SBATCH -t 04:00:00

module load singularity
IMAGE=$CINECA_SCRATCH/images/pytorch_24.05-py3.sif
export SINGULARITYENV_MASTER_ADDR=$(hostname)
export SINGULARITYENV_MASTER_PORT=29400

srun singularity exec --nv -B $CINECA_SCRATCH:/scratch $IMAGE python /scratch/code/train.py
