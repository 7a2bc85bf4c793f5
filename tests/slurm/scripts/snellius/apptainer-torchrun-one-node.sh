#!/bin/bash
#SBATCH -J vit
#SBATCH -p gpu_a100
#SBATCH -N 1
#SBATCH --gpus=4
#SBATCH -c 72
#SBATCH -t 1-00:00:00

IMG=/projects/0/prjs1234/containers/pytorch-24.10.sif
apptainer exec --nv -B /projects/0/prjs1234:/data $IMG \
    torchrun --standalone --nproc_per_node=4 train.py --data /data/imagenet
