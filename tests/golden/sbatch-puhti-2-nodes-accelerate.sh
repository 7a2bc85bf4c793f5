#!/bin/bash
# train_accelerate: 2 puhti node(s) x 4 GPUs, launcher accelerate. Written by envrun sbatch (envbuild 0.1.0).
# again: (golden case puhti-2-nodes-accelerate)
# check a hand edit: envrun sbatch --check THIS_FILE
# what squeue shows: the script's name
#SBATCH --job-name=train_accelerate
# the project the job is billed to (--account)
#SBATCH --account=project_2001234
# the smallest partition for 2 node(s) x 4 GPUs: shared nodes (recipes/puhti.yaml:24 partitions.gpu)
#SBATCH --partition=gpu
# --nodes 2
#SBATCH --nodes=2
# 4 GPUs per node in puhti's request form (recipes/puhti.yaml:39 launch.gpu_request)
#SBATCH --gres=gpu:v100:4
# accelerate starts the training processes itself: one launcher per node
#SBATCH --ntasks-per-node=1
# every CPU of the node (a puhti node: 4 GPUs, 40 Slurm CPUs (recipes/puhti.yaml:14 node)), for accelerate's processes
#SBATCH --cpus-per-task=40
# the whole node's memory for jobs (recipes/puhti.yaml:20 node.memory_gb)
#SBATCH --mem=373G
# envrun's default (1 hour); give --time, or batch: {time: ...} in the envrun config
#SBATCH --time=01:00:00
# %x: the job name, %j: the job id; relative to the submit directory
#SBATCH --output=%x-%j.out

# The training step. envrun reads this job's allocation at run time and (envrun --explain):
#   --ntasks-per-node=1: accelerate launch starts the training processes itself, one launcher per node
#   --cpus-per-task=40: the job's CPUs per node (SLURM_CPUS_ON_NODE=40), for accelerate launch's processes
#   4 process(es) per node: one process per GPU (SLURM_GPUS_ON_NODE=4)
#   OMP_NUM_THREADS=10: 40 CPUs / 4 processes
#   --kill-on-bad-exit=1: a crashed rank ends the whole step instead of leaving the others hanging
#   SLURM_NTASKS unset inside the step: it counts launchers, not ranks, and Lightning versions that check Slurm first would take the world size from it instead of accelerate launch's
#   job report: one sampler per node (the node's first task starts it) reads the step's GPUs and CPUs every few seconds; envrun prints the summary when the step ends (--no-report: none)
#   $WITH_CONDA is evaluated inside the container when the image sets it (LUMI PyTorch images), by bash when the image has it; envrun stops if the activation fails
#   --num_machines=$SLURM_STEP_NUM_NODES: the nodes of the step, one accelerate launch on each
#   --machine_rank=$SLURM_NODEID: this node's index in the step, read in each task
#   --main_process_ip=<first node of the step> (host's scontrol): the rendezvous host is machine rank 0
#   --main_process_port=<20000 + job id based port>: the same on every node of the step
#   --num_processes=<nodes> x 4: 4 process(es) on each node
#   --multi_gpu: accelerate's launcher that starts several processes per node (torch.distributed.run, static rendezvous on machine rank 0)
#   per-rank CPU affinity: the task's CPUs split evenly between its ranks, applied before each rank's Python starts
#   TOKENIZERS_PARALLELISM=false: tokenizer threads would fight the DataLoader workers after fork
#   apptainer --quiet: without its INFO lines, which say nothing about this run (warnings and errors still show; envrun -v keeps them)
#   --nv: recipes/puhti.yaml:35 runtime.flags
#   binds /scratch, /projappl: recipes/puhti.yaml:36 binds
#   envrun waits for srun and names the cause in one line when the step fails (a rank's exit code or signal, a time limit, a failed node), read from srun's exit status and messages
#   the job report goes to %x-%j.report/ (report.json, report.html, timeline.png, summary.txt), next to the job's output; its summary ends the output
envrun --system puhti --image /projappl/project_2001234/env.sif --report %x-%j.report srun accelerate launch train_accelerate.py --mixed-precision fp16
