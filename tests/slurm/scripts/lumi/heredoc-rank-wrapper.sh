#!/bin/bash -l
#SBATCH --account=project_465000000
##SBATCH --reservation=AI_workshop_2   # uncomment during the course's second day
#SBATCH --partition=small-g           # standard-g with --gpus-per-node=8 for whole nodes
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=4
#SBATCH --gpus-per-node=4
#SBATCH --cpus-per-task=7
#SBATCH --mem-per-gpu=60G
#SBATCH --time=0:30:00

module use /appl/local/containers/ai-modules
module load singularity-AI-bindings
SIF=/appl/local/containers/sif-images/lumi-pytorch-rocm-6.2.4-python-3.12-pytorch-v2.6.0.sif

# the per-rank wrapper, written by the job itself
cat > run_rank.sh <<'WRAPPER'
#!/bin/bash
export ROCR_VISIBLE_DEVICES=$SLURM_LOCALID RANK=$SLURM_PROCID LOCAL_RANK=$SLURM_LOCALID WORLD_SIZE=$SLURM_NTASKS
$WITH_CONDA
exec python train.py "$@"
WRAPPER
chmod +x run_rank.sh

# srun torchrun --nproc_per_node=4 old_train.py   (the launch before the wrapper)
srun singularity exec "$SIF" ./run_rank.sh --epochs 10
