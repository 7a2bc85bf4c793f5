#!/bin/bash
# train: 1 jupiter node(s) x 4 GPUs, launcher torchrun. Written by envrun sbatch (envbuild 0.1.0).
# again: (golden case jupiter-1-node)
# check a hand edit: envrun sbatch --check THIS_FILE
# what squeue shows: the script's name
#SBATCH --job-name=train
# the project the job is billed to (--account)
#SBATCH --account=training2600
# the smallest partition for 1 node(s) x 4 GPUs: whole nodes (recipes/jupiter.yaml:33 partitions.booster)
#SBATCH --partition=booster
# one node (--nodes)
#SBATCH --nodes=1
# 4 GPUs per node in jupiter's request form (recipes/jupiter.yaml:38 launch.gpu_request)
#SBATCH --gres=gpu:4
# torchrun starts the training processes itself: one launcher per node
#SBATCH --ntasks-per-node=1
# every CPU of the node (a jupiter node: 4 GPUs, 288 Slurm CPUs (recipes/jupiter.yaml:22 node)), for torchrun's processes
#SBATCH --cpus-per-task=288
# envrun's default (1 hour); give --time, or batch: {time: ...} in the envrun config
#SBATCH --time=01:00:00
# %x: the job name, %j: the job id; relative to the submit directory
#SBATCH --output=%x-%j.out

# The training step. envrun reads this job's allocation at run time and (envrun --explain):
#   --ntasks-per-node=1: torchrun starts the training processes itself, one launcher per node
#   --cpus-per-task=288: the job's CPUs per node (SLURM_CPUS_ON_NODE=288), for torchrun's processes
#   --nproc-per-node=4: one process per GPU (SLURM_GPUS_ON_NODE=4)
#   OMP_NUM_THREADS=72: 288 CPUs / 4 processes
#   --kill-on-bad-exit=1: a crashed rank ends the whole step instead of leaving the others hanging
#   SLURM_NTASKS unset inside the step: it counts launchers, not ranks, and Lightning versions that check Slurm first would take the world size from it instead of torchrun's
#   job report: one sampler per node (the node's first task starts it) reads the step's GPUs and CPUs every few seconds; envrun prints the summary when the step ends (--no-report: none)
#   $WITH_CONDA is evaluated inside the container when the image sets it (LUMI PyTorch images), by bash when the image has it; envrun stops if the activation fails
#   --standalone: one node, so torchrun hosts its own rendezvous on a free port
#   per-rank CPU affinity: the task's CPUs split evenly between its ranks, applied before each rank's Python starts
#   TOKENIZERS_PARALLELISM=false: tokenizer threads would fight the DataLoader workers after fork
#   apptainer --quiet: without its INFO lines, which say nothing about this run (warnings and errors still show; envrun -v keeps them)
#   --nv: recipes/jupiter.yaml:35 runtime.flags
#   envrun waits for srun and names the cause in one line when the step fails (a rank's exit code or signal, a time limit, a failed node), read from srun's exit status and messages
#   the job report goes to %x-%j.report/ (report.json, report.html, timeline.png, summary.txt), next to the job's output; its summary ends the output
envrun --system jupiter --image /p/project1/training2600/env-aarch64.sif --report %x-%j.report srun torchrun train.py --epochs 10
