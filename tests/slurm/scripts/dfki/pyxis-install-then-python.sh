#!/bin/bash
#SBATCH --job-name=pyxis-install
#SBATCH --partition=RTXA6000
#SBATCH --gpus=1
#SBATCH --cpus-per-task=8
#SBATCH --mem=64G
#SBATCH --time=04:00:00

# the project's install.sh runs pip, then execs the rest of its arguments
srun --container-image=/netscratch/enroot/nvcr.io_nvidia_pytorch_23.07-py3.sqsh \
     --container-workdir=`pwd` --container-mounts=/netscratch:/netscratch,`pwd`:`pwd` \
     install.sh python pretrain.py "$@"
