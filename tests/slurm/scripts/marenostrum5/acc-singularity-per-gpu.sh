#!/bin/bash
#SBATCH --job-name=seg
#SBATCH -A bsc70
#SBATCH --qos=acc_debug
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=4
#SBATCH --gres=gpu:4
#SBATCH --cpus-per-task=20
#SBATCH --time=02:00:00
#SBATCH --exclusive

module load singularity
export MASTER_ADDR=$(hostname)
export MASTER_PORT=29500

srun singularity exec --nv --bind /gpfs/projects/bsc70 /gpfs/projects/bsc70/images/torch.sif \
    python /gpfs/projects/bsc70/seg/train.py --epochs 10
