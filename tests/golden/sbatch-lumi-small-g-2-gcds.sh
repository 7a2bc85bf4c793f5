#!/bin/bash
# train: 1 lumi-g node(s) x 2 GPUs, launcher torchrun. Written by envrun sbatch (envbuild 0.1.0).
# again: (golden case lumi-small-g-2-gcds)
# check a hand edit: envrun sbatch --check THIS_FILE
# what squeue shows: the script's name
#SBATCH --job-name=train
# the project the job is billed to (--account)
#SBATCH --account=project_465000000
# the smallest partition for 1 node(s) x 2 GPUs: shared nodes (recipes/lumi-g.yaml:67 partitions.small-g)
#SBATCH --partition=small-g
# one node (--nodes)
#SBATCH --nodes=1
# 2 GPUs per node in lumi-g's request form (recipes/lumi-g.yaml:91 launch.gpu_request)
#SBATCH --gpus-per-node=2
# torchrun starts the training processes itself: one launcher per node
#SBATCH --ntasks-per-node=1
# 7 CPUs per GPU x 2 (a lumi-g node: 8 GPUs, 56 Slurm CPUs (recipes/lumi-g.yaml:46 node)), for torchrun's processes
#SBATCH --cpus-per-task=14
# 60G per GPU x 2 (recipes/lumi-g.yaml:55 node.memory_per_gpu_gb)
#SBATCH --mem=120G
# envrun's default (1 hour); give --time, or batch: {time: ...} in the envrun config
#SBATCH --time=01:00:00
# %x: the job name, %j: the job id; relative to the submit directory
#SBATCH --output=%x-%j.out

# The training step. envrun reads this job's allocation at run time and (envrun --explain):
#   --ntasks-per-node=1: torchrun starts the training processes itself, one launcher per node
#   --cpus-per-task=14: the job's CPUs per node (SLURM_CPUS_ON_NODE=14), for torchrun's processes
#   --nproc-per-node=2: one process per GPU (SLURM_GPUS_ON_NODE=2)
#   OMP_NUM_THREADS=7: 14 CPUs / 2 processes
#   --kill-on-bad-exit=1: a crashed rank ends the whole step instead of leaving the others hanging
#   SLURM_NTASKS unset inside the step: it counts launchers, not ranks, and Lightning versions that check Slurm first would take the world size from it instead of torchrun's
#   job report: one sampler per node (the node's first task starts it) reads the step's GPUs and CPUs every few seconds; envrun prints the summary when the step ends (--no-report: none)
#   $WITH_CONDA is evaluated inside the container when the image sets it (LUMI PyTorch images), by bash when the image has it; envrun stops if the activation fails
#   MIOPEN_USER_DB_PATH=/tmp/${USER}-miopen-cache-${SLURM_NODEID}: recipes/lumi-g.yaml:88 env.MIOPEN_USER_DB_PATH, expanded in each task
#   MIOPEN_CUSTOM_CACHE_DIR=/tmp/${USER}-miopen-cache-${SLURM_NODEID}: recipes/lumi-g.yaml:89 env.MIOPEN_CUSTOM_CACHE_DIR, expanded in each task
#   --standalone: one node, so torchrun hosts its own rendezvous on a free port
#   per-rank CPU affinity: the task's CPUs split evenly between its ranks, applied before each rank's Python starts
#   TOKENIZERS_PARALLELISM=false: tokenizer threads would fight the DataLoader workers after fork
#   NCCL_SOCKET_IFNAME: recipes/lumi-g.yaml:81 env.NCCL_SOCKET_IFNAME
#   FI_MR_CACHE_MONITOR: recipes/lumi-g.yaml:86 env.FI_MR_CACHE_MONITOR
#   apptainer --quiet: without its INFO lines, which say nothing about this run (warnings and errors still show; envrun -v keeps them)
#   binds /pfs, /scratch, /projappl, /project, /flash, /appl: recipes/lumi-g.yaml:78 binds
#   envrun waits for srun and names the cause in one line when the step fails (a rank's exit code or signal, a time limit, a failed node), read from srun's exit status and messages
#   the job report goes to %x-%j.report/ (report.json, report.html, timeline.png, summary.txt), next to the job's output; its summary ends the output
envrun --system lumi-g --image /appl/local/laifs/containers/lumi-multitorch-latest.sif --report %x-%j.report srun torchrun train.py --epochs 10
