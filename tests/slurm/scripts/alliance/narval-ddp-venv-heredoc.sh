#!/bin/bash
#SBATCH --account=def-someprof
#SBATCH --nodes=2
#SBATCH --gpus-per-node=a100:4
#SBATCH --tasks-per-node=4
#SBATCH --cpus-per-task=12
#SBATCH --mem=0
#SBATCH --time=0-03:00
#SBATCH --output=%N-%j.out

module load StdEnv/2023 python/3.11 scipy-stack

# a virtualenv on each node's local disk, built once per node
srun --ntasks $SLURM_NNODES --tasks-per-node=1 bash << EOF
virtualenv --no-download \$SLURM_TMPDIR/env
source \$SLURM_TMPDIR/env/bin/activate
pip install --no-index --upgrade pip
pip install --no-index torch torchvision
EOF

source $SLURM_TMPDIR/env/bin/activate
export MASTER_ADDR=$(hostname)
export NCCL_BLOCKING_WAIT=1

srun python pytorch-ddp-test.py --init_method tcp://$MASTER_ADDR:3456 \
    --world_size $((SLURM_NTASKS_PER_NODE * SLURM_JOB_NUM_NODES)) --batch_size 256
