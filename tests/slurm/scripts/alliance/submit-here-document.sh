#!/bin/bash
# Submit one training job per learning rate; each job is the here-document fed to sbatch.
LR=3e-4
ACCOUNT=def-someprof
sbatch <<EOF
#!/bin/bash
#SBATCH --account=$ACCOUNT
#SBATCH --job-name=lr-$LR
#SBATCH --nodes=1
#SBATCH --gpus-per-node=a100:4
#SBATCH --ntasks-per-node=4
#SBATCH --cpus-per-task=12
#SBATCH --mem=0
#SBATCH --time=0-12:00

module load python/3.11
source ~/envs/torch/bin/activate
export MASTER_ADDR=\$(hostname)
srun python train.py --lr $LR
EOF
