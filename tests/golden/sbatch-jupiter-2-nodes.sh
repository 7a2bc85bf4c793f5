#!/bin/bash
# train: 2 jupiter node(s) x 4 GPUs, launcher srun. Written by envrun sbatch (envbuild 0.1.0).
# again: (golden case jupiter-2-nodes)
# check a hand edit: envrun sbatch --check THIS_FILE
# what squeue shows: the script's name
#SBATCH --job-name=train
# the project the job is billed to (--account)
#SBATCH --account=training2600
# the smallest partition for 2 node(s) x 4 GPUs: whole nodes (recipes/jupiter.yaml:33 partitions.booster)
#SBATCH --partition=booster
# --nodes 2
#SBATCH --nodes=2
# 4 GPUs per node in jupiter's request form (recipes/jupiter.yaml:38 launch.gpu_request)
#SBATCH --gres=gpu:4
# srun starts one training process per GPU
#SBATCH --ntasks-per-node=4
# the CPUs that go with one GPU: 288 / 4 GPUs; every CPU of the node (a jupiter node: 4 GPUs, 288 Slurm CPUs (recipes/jupiter.yaml:22 node))
#SBATCH --cpus-per-task=72
# envrun's default (1 hour); give --time, or batch: {time: ...} in the envrun config
#SBATCH --time=01:00:00
# %x: the job name, %j: the job id; relative to the submit directory
#SBATCH --output=%x-%j.out

# The training step. envrun reads this job's allocation at run time and (envrun --explain):
#   --ntasks-per-node=4: the job's tasks per node (SLURM_NTASKS_PER_NODE=4)
#   --cpus-per-task=72: the job's CPUs per task (SLURM_CPUS_PER_TASK=72); srun does not pass it on to steps by itself
#   --cpu-bind=cores: each task pinned to its own --cpus-per-task cores
#   OMP_NUM_THREADS=72: the 72 CPUs of each task
#   --kill-on-bad-exit=1: a crashed rank ends the whole step instead of leaving the others hanging
#   RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE from SLURM_PROCID, SLURM_LOCALID, SLURM_NTASKS, SLURM_STEP_TASKS_PER_NODE; MASTER_ADDR = first node of the step (host's scontrol), MASTER_PORT from the job id
#   job report: one sampler per node (the node's first task starts it) reads the step's GPUs and CPUs every few seconds; envrun prints the summary when the step ends (--no-report: none)
#   $WITH_CONDA is evaluated inside the container when the image sets it (LUMI PyTorch images), by bash when the image has it; envrun stops if the activation fails
#   TOKENIZERS_PARALLELISM=false: tokenizer threads would fight the DataLoader workers after fork
#   apptainer --quiet: without its INFO lines, which say nothing about this run (warnings and errors still show; envrun -v keeps them)
#   --nv: recipes/jupiter.yaml:35 runtime.flags
#   envrun waits for srun and names the cause in one line when the step fails (a rank's exit code or signal, a time limit, a failed node), read from srun's exit status and messages
#   the job report goes to %x-%j.report/ (report.json, report.html, timeline.png, summary.txt), next to the job's output; its summary ends the output
envrun --system jupiter --image /p/project1/training2600/env-aarch64.sif --report %x-%j.report srun python train.py --epochs 10
