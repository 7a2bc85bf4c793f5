#!/bin/bash
#SBATCH --account=project_2001234
#SBATCH --partition=gpu
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=4
#SBATCH --cpus-per-task=10
#SBATCH --mem-per-gpu=90G
#SBATCH --time=06:00:00
#SBATCH --gres=gpu:v100:4

module purge
module load pytorch

# train.py picks its GPU with torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
export LOCAL_RANK=$SLURM_LOCALID
export RANK=$SLURM_PROCID
export WORLD_SIZE=$SLURM_NTASKS
export MASTER_ADDR=$(hostname)
export MASTER_PORT=29500

srun python3 train.py --epochs 20
