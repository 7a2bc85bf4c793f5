#!/bin/bash -l
#SBATCH --job-name=mlx-ddp
#SBATCH --account=p200301
#SBATCH --partition=gpu
#SBATCH --qos=default
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-task=4
#SBATCH --cpus-per-task=128
#SBATCH --time=02:00:00

module load env/release/2024.1
module load Apptainer/1.3.4-GCCcore-13.3.0

export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
srun apptainer exec --nv --bind /project/home/p200301:/work pytorch.sif \
    python -m torch.distributed.run --nnodes 2 --nproc_per_node 4 --rdzv_backend c10d \
    --rdzv_endpoint $MASTER_ADDR:29500 /work/train.py
