#!/bin/bash
#SBATCH --job-name=ddp-2node
#SBATCH --partition=kempner_h100
#SBATCH --account=kempner_grads
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=4
#SBATCH --cpus-per-task=64
#SBATCH --mem=750G
#SBATCH --time=0-06:00
#SBATCH --output=logs/%x_%j.out

module load python/3.12.5-fasrc01
conda activate torch-2.5

# the head node's address, for torchrun's rendezvous
nodes=( $( scontrol show hostnames $SLURM_JOB_NODELIST ) )
nodes_array=($nodes)
head_node=${nodes_array[0]}
head_node_ip=$(srun --nodes=1 --ntasks=1 -w "$head_node" hostname --ip-address)
echo "rendezvous at $head_node_ip"

srun torchrun --nnodes $SLURM_NNODES --nproc_per_node 4 \
    --rdzv_id $RANDOM --rdzv_backend c10d --rdzv_endpoint $head_node_ip:29500 \
    train_ddp.py --batch-size 256
