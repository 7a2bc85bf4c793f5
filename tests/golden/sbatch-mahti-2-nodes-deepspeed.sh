#!/bin/bash
# train: 2 mahti node(s) x 4 GPUs, launcher deepspeed. Written by envrun sbatch (envbuild 0.1.0).
# again: (golden case mahti-2-nodes-deepspeed)
# check a hand edit: envrun sbatch --check THIS_FILE
# what squeue shows: the script's name
#SBATCH --job-name=train
# the project the job is billed to (--account)
#SBATCH --account=project_2001234
# the smallest partition for 2 node(s) x 4 GPUs: whole nodes (recipes/mahti.yaml:27 partitions.gpumedium)
#SBATCH --partition=gpumedium
# --nodes 2
#SBATCH --nodes=2
# 4 GPUs per node in mahti's request form (recipes/mahti.yaml:39 launch.gpu_request)
#SBATCH --gres=gpu:a100:4
# deepspeed starts the training processes itself: one launcher per node
#SBATCH --ntasks-per-node=1
# every CPU of the node (a mahti node: 4 GPUs, 128 Slurm CPUs (recipes/mahti.yaml:15 node)), for deepspeed's processes
#SBATCH --cpus-per-task=128
# envrun's default (1 hour); give --time, or batch: {time: ...} in the envrun config
#SBATCH --time=01:00:00
# %x: the job name, %j: the job id; relative to the submit directory
#SBATCH --output=%x-%j.out

# The training step. envrun reads this job's allocation at run time and (envrun --explain):
#   --ntasks-per-node=1: deepspeed.launcher.launch starts the training processes itself, one launcher per node
#   --cpus-per-task=128: the job's CPUs per node (SLURM_CPUS_ON_NODE=128), for deepspeed.launcher.launch's processes
#   4 process(es) per node: one process per GPU (SLURM_GPUS_ON_NODE=4)
#   OMP_NUM_THREADS=32: 128 CPUs / 4 processes
#   --kill-on-bad-exit=1: a crashed rank ends the whole step instead of leaving the others hanging
#   SLURM_NTASKS unset inside the step: it counts launchers, not ranks, and Lightning versions that check Slurm first would take the world size from it instead of deepspeed.launcher.launch's
#   job report: one sampler per node (the node's first task starts it) reads the step's GPUs and CPUs every few seconds; envrun prints the summary when the step ends (--no-report: none)
#   $WITH_CONDA is evaluated inside the container when the image sets it (LUMI PyTorch images), by bash when the image has it; envrun stops if the activation fails
#   DeepSpeed's per-node launcher `python -m deepspeed.launcher.launch` on every node instead of the deepspeed runner, which would start the other nodes' launchers over ssh/pdsh
#   --world_info: {node0..node<N-1>: [0..3]} for the step's N nodes, base64 JSON made in each task; --node_rank=$SLURM_NODEID
#   --master_addr=<first node of the step> (host's scontrol)
#   --master_port=<20000 + job id based port>: the same on every node of the step
#   TOKENIZERS_PARALLELISM=false: tokenizer threads would fight the DataLoader workers after fork
#   apptainer --quiet: without its INFO lines, which say nothing about this run (warnings and errors still show; envrun -v keeps them)
#   --nv: recipes/mahti.yaml:35 runtime.flags
#   binds /scratch, /projappl: recipes/mahti.yaml:36 binds
#   envrun waits for srun and names the cause in one line when the step fails (a rank's exit code or signal, a time limit, a failed node), read from srun's exit status and messages
#   the job report goes to %x-%j.report/ (report.json, report.html, timeline.png, summary.txt), next to the job's output; its summary ends the output
envrun --system mahti --image /projappl/project_2001234/env.sif --report %x-%j.report srun deepspeed train.py --deepspeed_config ds_config.json
