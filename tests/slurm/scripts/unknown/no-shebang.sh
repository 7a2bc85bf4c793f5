#SBATCH --job-name=resnet
#SBATCH --partition=a100
#SBATCH --gres=gpu:a100:1
#SBATCH --time=10:00:00

module load python/3.12 cuda/12.4
srun python train_resnet.py
