#!/bin/bash
#SBATCH -J llm
#SBATCH -p gh-dev
#SBATCH -N 2
#SBATCH -n 2
#SBATCH -t 01:00:00
#SBATCH -A ASC23018

module load tacc-apptainer
export IMG=$SCRATCH/images/pytorch_24.09.sif

ibrun apptainer exec --nv $IMG python3 pretrain.py --micro-batch 4
