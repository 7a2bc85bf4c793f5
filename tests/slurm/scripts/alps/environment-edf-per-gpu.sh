#!/bin/bash
#SBATCH --job-name=ngc-ddp
#SBATCH --account=a-a06
#SBATCH --partition=normal
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=4
#SBATCH --gpus-per-node=4
#SBATCH --cpus-per-task=72
#SBATCH --time=01:30:00
#SBATCH --environment=ngc-pytorch
#SBATCH --output=logs/%x-%j.out

# the container (an EDF under ~/.edf) comes from --environment; each task is one GH200
export MASTER_ADDR=$(scontrol show hostnames $SLURM_NODELIST | head -n 1)
export MASTER_PORT=25678
export OMP_NUM_THREADS=8

srun -ul bash -c '
  export RANK=$SLURM_PROCID LOCAL_RANK=$SLURM_LOCALID WORLD_SIZE=$SLURM_NTASKS
  python train.py --data /capstor/scratch/cscs/$USER/data
'
