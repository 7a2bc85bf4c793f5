#!/bin/bash
#SBATCH --job-name=unet
#SBATCH --partition=gpu_h100
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=4
#SBATCH --gpus-per-node=4
#SBATCH --cpus-per-task=16
#SBATCH --time=05:00:00

module purge
module load 2024
module load PyTorch/2.5.1-foss-2024a-CUDA-12.6.0

export MASTER_ADDR=$(hostname)
export MASTER_PORT=29500
cd "$TMPDIR"
cp -r $HOME/unet/data.tar . && tar -xf data.tar

srun python $HOME/unet/train.py --data "$TMPDIR/data"
