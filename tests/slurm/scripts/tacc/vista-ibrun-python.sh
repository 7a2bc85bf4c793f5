#!/bin/bash
#SBATCH -J resnet-ddp
#SBATCH -o resnet.o%j
#SBATCH -p gh
#SBATCH -N 4
#SBATCH -n 4
#SBATCH -t 04:00:00
#SBATCH -A ASC23018
#SBATCH --mail-type=end

module load gcc cuda python3_mpi
source $WORK/venvs/torch/bin/activate
cd $SCRATCH/resnet

# ibrun (TACC's MPI launcher) starts one rank per task, one GH200 each
ibrun python train.py --backend nccl --epochs 90
