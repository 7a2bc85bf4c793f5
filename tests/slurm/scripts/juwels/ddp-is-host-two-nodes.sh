#!/bin/bash -x
#SBATCH --account=training2426
#SBATCH --partition=booster
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=48
#SBATCH --gres=gpu:4
#SBATCH --time=00:30:00

# Without this, srun does not inherit cpus-per-task from sbatch.
export SRUN_CPUS_PER_TASK="$SLURM_CPUS_PER_TASK"
MASTER_ADDR="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"
MASTER_ADDR="${MASTER_ADDR}i"
export MASTER_PORT=29500
export NCCL_SOCKET_IFNAME=ib0 GLOO_SOCKET_IFNAME=ib0
source sc_venv_template/activate.sh

srun --cpu-bind=none bash -c "torchrun --nnodes=$SLURM_NNODES --nproc_per_node=4 \
    --rdzv_id=$SLURM_JOB_ID --rdzv_conf=is_host=\$(( SLURM_NODEID == 0 ? 1 : 0 )) \
    --rdzv_backend=c10d --rdzv_endpoint=$MASTER_ADDR:$MASTER_PORT train.py"
