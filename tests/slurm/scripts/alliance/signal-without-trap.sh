#!/bin/bash
#SBATCH --account=def-someprof
#SBATCH --nodes=1
#SBATCH --gpus-per-node=a100:2
#SBATCH --ntasks-per-node=2
#SBATCH --cpus-per-task=8
#SBATCH --mem=64G
#SBATCH --time=1-00:00
#SBATCH --signal=B:TERM@600

module load python/3.11
source ~/envs/torch/bin/activate

# the trainer saves a checkpoint on SIGTERM... but B: sends it to this shell only
srun python train.py --save-on-sigterm
