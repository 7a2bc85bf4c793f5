#!/bin/bash
#SBATCH --account=project_2001234
#SBATCH --partition=gputest
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=72
#SBATCH --time=00:15:00

module purge
module load python-pytorch

srun python3 -c 'import torch; print(torch.cuda.device_count())'
