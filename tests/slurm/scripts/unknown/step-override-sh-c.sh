#!/bin/bash
#SBATCH --account=p200123
#SBATCH --qos=default
#SBATCH --partition=gpu
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=4
#SBATCH --cpus-per-task=16
#SBATCH --gpus-per-node=4
#SBATCH --time=06:00:00

module load env/release/2024.1 Python
source .venv/bin/activate
head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)

# training: one torchrun per node, overriding the job's 4 tasks per node for this step
srun --ntasks-per-node=1 --cpus-per-task=64 sh -c "torchrun --nnodes=$SLURM_NNODES --nproc_per_node=4 \
    --rdzv_id=$SLURM_JOB_ID --rdzv_backend=c10d --rdzv_endpoint=$head:29500 train.py"
# evaluation: one python per GPU, the job's own shape
srun python evaluate.py --checkpoint last.pt
