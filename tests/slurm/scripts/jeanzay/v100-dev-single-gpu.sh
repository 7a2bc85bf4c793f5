#!/bin/bash
#SBATCH --job-name=smoke
#SBATCH -A abc@v100
#SBATCH -C v100-32g
#SBATCH --qos=qos_gpu-dev
#SBATCH --ntasks=1
#SBATCH --gres=gpu:1
#SBATCH --cpus-per-task=10
#SBATCH --hint=nomultithread
#SBATCH --time=00:10:00

module purge
module load pytorch-gpu/py3/2.1.1

cd ${WORK}/smoke
srun python -c "import torch; print(torch.cuda.get_device_name())"
srun python check_env.py
