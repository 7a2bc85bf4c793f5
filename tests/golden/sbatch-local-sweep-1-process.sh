#!/bin/bash
# ddp_minimal: 1 local node(s), launcher torchrun. Written by envrun sbatch (envbuild 0.1.0).
# again: (golden case local-sweep-1-process)
# check a hand edit: envrun sbatch --check THIS_FILE
# what squeue shows: the script's name
#SBATCH --job-name=ddp_minimal
# the smallest partition for 1 node(s): shared nodes (recipes/local.yaml:12 partitions.debug)
#SBATCH --partition=debug
# one node (--nodes)
#SBATCH --nodes=1
# torchrun starts the training processes itself: one launcher per node
#SBATCH --ntasks-per-node=1
# 1 CPU(s) per process x 1 process (this host: 2 CPUs, 0 GPUs (recipes/local.yaml:10 node)), for torchrun's processes
#SBATCH --cpus-per-task=1
# envrun's default (1 hour); give --time, or batch: {time: ...} in the envrun config
#SBATCH --time=01:00:00
# %x: the job name, %j: the job id; relative to the submit directory
#SBATCH --output=%x-%j.out

# The training step. envrun reads this job's allocation at run time and (envrun --explain):
#   --ntasks-per-node=1: torchrun starts the training processes itself, one launcher per node
#   --cpus-per-task=1: the job's CPUs per node (SLURM_CPUS_ON_NODE=1), for torchrun's processes
#   --nproc-per-node=1: 1 CPUs, 1 per process (one process per CPU on a host without GPUs, as torchrun --nproc-per-node=auto)
#   OMP_NUM_THREADS=1: 1 CPUs / 1 processes
#   --kill-on-bad-exit=1: a crashed rank ends the whole step instead of leaving the others hanging
#   SLURM_NTASKS unset inside the step: it counts launchers, not ranks, and Lightning versions that check Slurm first would take the world size from it instead of torchrun's
#   job report: one sampler per node (the node's first task starts it) reads the step's GPUs and CPUs every few seconds; envrun prints the summary when the step ends (--no-report: none)
#   $WITH_CONDA is evaluated inside the container when the image sets it (LUMI PyTorch images), by bash when the image has it; envrun stops if the activation fails
#   --standalone: one node, so torchrun hosts its own rendezvous on a free port
#   per-rank CPU affinity: the task's CPUs split evenly between its ranks, applied before each rank's Python starts
#   TOKENIZERS_PARALLELISM=false: tokenizer threads would fight the DataLoader workers after fork
#   apptainer --quiet: without its INFO lines, which say nothing about this run (warnings and errors still show; envrun -v keeps them)
#   envrun waits for srun and names the cause in one line when the step fails (a rank's exit code or signal, a time limit, a failed node), read from srun's exit status and messages
#   the job report goes to %x-%j.report/ (report.json, report.html, timeline.png, summary.txt), next to the job's output; its summary ends the output
envrun_step_start=$(date +%s%N)
envrun --system local --image /work/proj/local-cpu-pytorch.sif --report %x-%j.report srun torchrun examples/ddp_minimal.py
status=$?
echo "envrun-step: wall_ms=$(( ($(date +%s%N) - envrun_step_start) / 1000000 )) exit=$status"
exit "$status"
