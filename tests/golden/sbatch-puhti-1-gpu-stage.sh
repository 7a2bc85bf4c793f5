#!/bin/bash
# train: 1 puhti node(s) x 1 GPUs, launcher torchrun. Written by envrun sbatch (envbuild 0.1.0).
# again: (golden case puhti-1-gpu-stage)
# check a hand edit: envrun sbatch --check THIS_FILE
# what squeue shows: the script's name
#SBATCH --job-name=train
# the project the job is billed to (--account)
#SBATCH --account=project_2001234
# the smallest partition for 1 node(s) x 1 GPUs: shared nodes (recipes/puhti.yaml:24 partitions.gpu)
#SBATCH --partition=gpu
# one node (--nodes)
#SBATCH --nodes=1
# 1 GPUs per node in puhti's request form (recipes/puhti.yaml:39 launch.gpu_request); 49 GB of node-local disk for --stage (recipes/puhti.yaml:46 batch.staging.gres)
#SBATCH --gres=gpu:v100:1,nvme:49
# torchrun starts the training processes itself: one launcher per node
#SBATCH --ntasks-per-node=1
# 10 CPUs per GPU x 1 (a puhti node: 4 GPUs, 40 Slurm CPUs (recipes/puhti.yaml:14 node)), for torchrun's processes
#SBATCH --cpus-per-task=10
# 95G per GPU x 1 (recipes/puhti.yaml:21 node.memory_per_gpu_gb)
#SBATCH --mem=95G
# envrun's default (1 hour); give --time, or batch: {time: ...} in the envrun config
#SBATCH --time=01:00:00
# %x: the job name, %j: the job id; relative to the submit directory
#SBATCH --output=%x-%j.out


# --stage: once per node, to node-local storage (recipes/puhti.yaml:45 batch.staging.dir)
export ENVRUN_STAGE_DIR="$LOCAL_SCRATCH"
export ENVRUN_STAGED="$ENVRUN_STAGE_DIR"/imagenet-mini/imagenet-mini
#   /scratch/project_2001234/imagenet-mini.tar (tar, 40.00 GB) -> $ENVRUN_STAGE_DIR/imagenet-mini
stage_script='set -e
dir=$1; shift
node=${SLURMD_NODENAME:-$(hostname)}
mkdir -p -m 700 "$dir"
me=$(id -u)
ours() { [ -n "$(find "$1" -maxdepth 0 \( -user "$me" -o -user 0 \) 2>/dev/null)" ]; }
if ! ours "$dir" || ! ours "$dir/"; then
  echo "envrun: stage: $dir on $node was made by another user (or is their link): nothing staged;" \
       "fix: stage to the job'"'"'s own directory (\$LOCAL_SCRATCH, \$TMPDIR), or ask its owner to remove it" >&2
  exit 1
fi
start=$(date +%s)
while [ $# -gt 0 ]; do
  kind=$1 src=$2 name=$3; shift 3
  if [ -e "$dir/$name" ]; then
    echo "envrun: stage: $dir/$name is already on $node"
    continue
  fi
  tmp="$dir/.$name.partial-$node-$$"
  rm -rf "$tmp"
  case $kind in
    tar) mkdir -p "$tmp" && tar -xf "$src" -C "$tmp" ;;
    zip) mkdir -p "$tmp" && python3 -m zipfile -e "$src" "$tmp" ;;
    dir) mkdir -p "$tmp" && cp -a "$src/." "$tmp/" ;;
    *) cp "$src" "$tmp" ;;
  esac
  mv -T "$tmp" "$dir/$name" 2>/dev/null || { rm -rf "$tmp"; echo "envrun: stage: $dir/$name is already on $node"; }
done
echo "envrun: staged to $dir on $node in $(( $(date +%s) - start )) s"'
srun --ntasks="$SLURM_JOB_NUM_NODES" --ntasks-per-node=1 --kill-on-bad-exit=1 /bin/sh -c "$stage_script" envrun-stage "$ENVRUN_STAGE_DIR" tar /scratch/project_2001234/imagenet-mini.tar imagenet-mini || { echo 'envrun: staging failed' >&2; exit 1; }

# The training step. envrun reads this job's allocation at run time and (envrun --explain):
#   --ntasks-per-node=1: torchrun starts the training processes itself, one launcher per node
#   --cpus-per-task=10: the job's CPUs per node (SLURM_CPUS_ON_NODE=10), for torchrun's processes
#   --nproc-per-node=1: one process per GPU (SLURM_GPUS_ON_NODE=1)
#   OMP_NUM_THREADS=10: 10 CPUs / 1 processes
#   --kill-on-bad-exit=1: a crashed rank ends the whole step instead of leaving the others hanging
#   SLURM_NTASKS unset inside the step: it counts launchers, not ranks, and Lightning versions that check Slurm first would take the world size from it instead of torchrun's
#   job report: one sampler per node (the node's first task starts it) reads the step's GPUs and CPUs every few seconds; envrun prints the summary when the step ends (--no-report: none)
#   $WITH_CONDA is evaluated inside the container when the image sets it (LUMI PyTorch images), by bash when the image has it; envrun stops if the activation fails
#   --standalone: one node, so torchrun hosts its own rendezvous on a free port
#   per-rank CPU affinity: the task's CPUs split evenly between its ranks, applied before each rank's Python starts
#   TOKENIZERS_PARALLELISM=false: tokenizer threads would fight the DataLoader workers after fork
#   apptainer --quiet: without its INFO lines, which say nothing about this run (warnings and errors still show; envrun -v keeps them)
#   --nv: recipes/puhti.yaml:35 runtime.flags
#   binds /scratch, /projappl: recipes/puhti.yaml:36 binds
#   envrun waits for srun and names the cause in one line when the step fails (a rank's exit code or signal, a time limit, a failed node), read from srun's exit status and messages
#   the job report goes to %x-%j.report/ (report.json, report.html, timeline.png, summary.txt), next to the job's output; its summary ends the output
envrun --system puhti --image /projappl/project_2001234/env.sif --report %x-%j.report --bind "$ENVRUN_STAGE_DIR" srun torchrun train.py --data "${ENVRUN_STAGED}"/train
