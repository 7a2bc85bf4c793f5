#!/bin/bash
#SBATCH --job-name=tokenize
#SBATCH --account=bsc70
#SBATCH --qos=gp_bscls
#SBATCH --array=0-31
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=112
#SBATCH --time=06:00:00

module load python/3.12.1
source /gpfs/projects/bsc70/envs/data/bin/activate
shard=$(printf "%05d" "$SLURM_ARRAY_TASK_ID")
python tokenize_shard.py --input "raw/shard-$shard.jsonl" --workers "$SLURM_CPUS_PER_TASK"
