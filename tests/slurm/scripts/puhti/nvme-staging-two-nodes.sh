#!/bin/bash
#SBATCH --account=project_2001234
#SBATCH --partition=gpu
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=40
#SBATCH --mem=320G
#SBATCH --time=1-00:00:00
#SBATCH --gres=gpu:v100:4,nvme:200

module purge
module load pytorch

# stage the data once per node
srun --ntasks=$SLURM_NNODES --ntasks-per-node=1 tar -xf /scratch/project_2001234/data/imagenet.tar -C $LOCAL_SCRATCH

srun apptainer_wrapper exec torchrun --nnodes=2 --nproc_per_node=4 \
    --rdzv_id=$SLURM_JOB_ID --rdzv_backend=c10d --rdzv_endpoint=$(hostname):29400 \
    train.py --data-dir $LOCAL_SCRATCH/imagenet
