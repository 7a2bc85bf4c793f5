#!/bin/bash
#SBATCH --job-name=pyxis-ddp
#SBATCH --partition=H100
#SBATCH --nodes=1
#SBATCH --ntasks=4
#SBATCH --gpus-per-task=1
#SBATCH --cpus-per-task=12
#SBATCH --mem=200G
#SBATCH --time=1-00:00:00

srun --container-image=/netscratch/enroot/nvcr.io_nvidia_pytorch_24.05-py3.sqsh \
     --container-workdir="$(pwd)" \
     --container-mounts=/netscratch:/netscratch,/ds:/ds:ro,"$(pwd)":"$(pwd)" \
     --export=ALL,NCCL_SOCKET_IFNAME=bond \
     python train.py --data /ds/images
