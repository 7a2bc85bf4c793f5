#!/bin/bash
# train: 1 lumi-g node(s) x 8 GPUs, launcher srun. Written by envrun sbatch (envbuild 0.1.0).
# again: (golden case lumi-8-tasks-masks)
# check a hand edit: envrun sbatch --check THIS_FILE
# what squeue shows: the script's name
#SBATCH --job-name=train
# the project the job is billed to (--account)
#SBATCH --account=project_465000000
# the smallest partition for 1 node(s) x 8 GPUs: whole nodes (recipes/lumi-g.yaml:66 partitions.standard-g)
#SBATCH --partition=standard-g
# one node (--nodes)
#SBATCH --nodes=1
# 8 GPUs per node in lumi-g's request form (recipes/lumi-g.yaml:91 launch.gpu_request)
#SBATCH --gpus-per-node=8
# srun starts one training process per GPU
#SBATCH --ntasks-per-node=8
# the CPUs that go with one GPU: 56 / 8 GPUs; every CPU of the node (a lumi-g node: 8 GPUs, 56 Slurm CPUs (recipes/lumi-g.yaml:46 node))
#SBATCH --cpus-per-task=7
# the whole node's memory for jobs (recipes/lumi-g.yaml:54 node.memory_gb)
#SBATCH --mem=480G
# envrun's default (1 hour); give --time, or batch: {time: ...} in the envrun config
#SBATCH --time=01:00:00
# %x: the job name, %j: the job id; relative to the submit directory
#SBATCH --output=%x-%j.out

# The training step. envrun reads this job's allocation at run time and (envrun --explain):
#   --ntasks-per-node=8: the job's tasks per node (SLURM_NTASKS_PER_NODE=8)
#   --cpus-per-task=7: the job's CPUs per task (SLURM_CPUS_PER_TASK=7); srun does not pass it on to steps by itself
#   --gpu-bind=map:4,5,2,3,6,7,0,1 --gres-flags=allow-task-sharing (recipes/lumi-g.yaml:101 launch.gpu_bind) where srun is Slurm 23.11.4 or newer, else the CPU masks below: envrun reads srun's version when it starts the step
#   --cpu-bind=mask_cpu:...: each task on the cores closest to its 1 GPU(s) (recipes/lumi-g.yaml:56 node.gpu_cores); partition standard-g gives whole nodes (recipes/lumi-g.yaml:66 partitions.standard-g)
#   OMP_NUM_THREADS=7: the 7 CPUs of each task
#   --kill-on-bad-exit=1: a crashed rank ends the whole step instead of leaving the others hanging
#   ROCR_VISIBLE_DEVICES=$SLURM_LOCALID in each task: recipes/lumi-g.yaml:93 launch.per_task_gpu_env.ROCR_VISIBLE_DEVICES
#   RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE from SLURM_PROCID, SLURM_LOCALID, SLURM_NTASKS, SLURM_STEP_TASKS_PER_NODE; MASTER_ADDR = first node of the step (host's scontrol), MASTER_PORT from the job id
#   job report: one sampler per node (the node's first task starts it) reads the step's GPUs and CPUs every few seconds; envrun prints the summary when the step ends (--no-report: none)
#   $WITH_CONDA is evaluated inside the container when the image sets it (LUMI PyTorch images), by bash when the image has it; envrun stops if the activation fails
#   MIOPEN_USER_DB_PATH=/tmp/${USER}-miopen-cache-${SLURM_NODEID}: recipes/lumi-g.yaml:88 env.MIOPEN_USER_DB_PATH, expanded in each task
#   MIOPEN_CUSTOM_CACHE_DIR=/tmp/${USER}-miopen-cache-${SLURM_NODEID}: recipes/lumi-g.yaml:89 env.MIOPEN_CUSTOM_CACHE_DIR, expanded in each task
#   TOKENIZERS_PARALLELISM=false: tokenizer threads would fight the DataLoader workers after fork
#   NCCL_SOCKET_IFNAME: recipes/lumi-g.yaml:81 env.NCCL_SOCKET_IFNAME
#   FI_MR_CACHE_MONITOR: recipes/lumi-g.yaml:86 env.FI_MR_CACHE_MONITOR
#   apptainer --quiet: without its INFO lines, which say nothing about this run (warnings and errors still show; envrun -v keeps them)
#   binds /pfs, /scratch, /projappl, /project, /flash, /appl: recipes/lumi-g.yaml:78 binds
#   envrun waits for srun and names the cause in one line when the step fails (a rank's exit code or signal, a time limit, a failed node), read from srun's exit status and messages
#   the job report goes to %x-%j.report/ (report.json, report.html, timeline.png, summary.txt), next to the job's output; its summary ends the output
envrun --system lumi-g --image /appl/local/laifs/containers/lumi-multitorch-latest.sif --report %x-%j.report srun python train.py --epochs 10
