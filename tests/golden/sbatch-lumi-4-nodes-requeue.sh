#!/bin/bash
# train: 4 lumi-g node(s) x 8 GPUs, launcher torchrun. Written by envrun sbatch (envbuild 0.1.0).
# again: (golden case lumi-4-nodes-requeue)
# check a hand edit: envrun sbatch --check THIS_FILE
# what squeue shows: the script's name
#SBATCH --job-name=train
# the project the job is billed to (--account)
#SBATCH --account=project_465000000
# the smallest partition for 4 node(s) x 8 GPUs: whole nodes (recipes/lumi-g.yaml:66 partitions.standard-g)
#SBATCH --partition=standard-g
# --nodes 4
#SBATCH --nodes=4
# 8 GPUs per node in lumi-g's request form (recipes/lumi-g.yaml:91 launch.gpu_request)
#SBATCH --gpus-per-node=8
# torchrun starts the training processes itself: one launcher per node
#SBATCH --ntasks-per-node=1
# every CPU of the node (a lumi-g node: 8 GPUs, 56 Slurm CPUs (recipes/lumi-g.yaml:46 node)), for torchrun's processes
#SBATCH --cpus-per-task=56
# the whole node's memory for jobs (recipes/lumi-g.yaml:54 node.memory_gb)
#SBATCH --mem=480G
# the time limit (--time 2-00:00:00)
#SBATCH --time=2-00:00:00
# %x: the job name, %j: the job id; relative to the submit directory
#SBATCH --output=%x-%j.out
# a requeued run appends to the same output file
#SBATCH --open-mode=append
# Slurm sends USR1 to this script 90 s before the time limit (B: the batch shell only; envrun passes it on to the ranks)
#SBATCH --signal=B:USR1@90
# the job may be put back in the queue (scontrol requeue) after a checkpoint
#SBATCH --requeue


# --requeue: USR1 arrives 90 s before the time limit. The training is asked to checkpoint: the file
# $ENVRUN_CHECKPOINT_FILE appears and each rank gets SIGUSR1. When the step has ended the job requeues
# itself, at most 3 times ($SLURM_RESTART_COUNT); $ENVRUN_RESTART tells the run which one it is.
export ENVRUN_RESTART="${SLURM_RESTART_COUNT:-0}"
envrun_job_dir="$PWD/.envrun/job-$SLURM_JOB_ID"
export ENVRUN_CHECKPOINT_FILE="$envrun_job_dir/checkpoint-now"
export ENVRUN_SIGNAL_DIR="$envrun_job_dir/ranks"
# The job's own directory, made afresh and private (0700): the submission directory may be a group's, and
# what another member left at this name goes (rm removes a link, never its target) or stops the job here.
mkdir -p -m 700 "$PWD/.envrun" && rm -rf "$envrun_job_dir" && mkdir -m 700 "$envrun_job_dir" "$ENVRUN_SIGNAL_DIR" || {
    echo "envrun: cannot make the job's private directory $envrun_job_dir: fix: submit from a directory where" \
         "no other user writes .envrun" >&2; exit 1; }
[ "$ENVRUN_RESTART" = 0 ] || echo "envrun: job $SLURM_JOB_ID is back: restart $ENVRUN_RESTART" >&2
checkpoint=0 interrupted=0 watchdog=
requeue_job() {
    if [ "${SLURM_RESTART_COUNT:-0}" -ge 3 ]; then
        echo "envrun: not requeueing: the job was restarted 3 times already (--requeue-max)" >&2
        return 1
    fi
    echo "envrun: requeueing job $SLURM_JOB_ID (restart $(( ${SLURM_RESTART_COUNT:-0} + 1 )) of 3)" >&2
    scontrol requeue "$SLURM_JOB_ID"
}
checkpoint_now() {
    checkpoint=1 interrupted=1
    echo "envrun: $(date +%T) USR1: the time limit is 90 s away; asking the ranks to checkpoint" >&2
    srun --overlap --ntasks="$SLURM_JOB_NUM_NODES" --ntasks-per-node=1 envrun signal-ranks USR1 "$ENVRUN_SIGNAL_DIR" >&2 || echo "envrun: could not signal the ranks; they still see $ENVRUN_CHECKPOINT_FILE" >&2
    # the file after the signal: a rank that leaves on the file alone must not meet the signal as it exits;
    # made only in the job's own directory (another member may have swapped it since; never through a link)
    if [ -O "$envrun_job_dir" ] && [ ! -L "$envrun_job_dir" ] && [ ! -L "$ENVRUN_CHECKPOINT_FILE" ]; then
        : > "$ENVRUN_CHECKPOINT_FILE"
    else
        echo "envrun: $envrun_job_dir is no longer this job's own directory: no checkpoint file made" >&2
    fi
    ( sleep 75; echo "envrun: the step did not end within 75 s of the signal" >&2; requeue_job ) &
    watchdog=$!
}
trap checkpoint_now USR1

# The training step. envrun reads this job's allocation at run time and (envrun --explain):
#   --ntasks-per-node=1: torchrun starts the training processes itself, one launcher per node
#   --cpus-per-task=56: the job's CPUs per node (SLURM_CPUS_ON_NODE=56), for torchrun's processes
#   --nproc-per-node=8: one process per GPU (SLURM_GPUS_ON_NODE=8)
#   torchrun --numa-binding=exclusive (recipes/lumi-g.yaml:106 launch.numa_binding) where the image's torch is 2.11 or newer and the image has numactl, else envrun pins each rank itself (below): envrun reads the image's torch when it starts the step
#   each rank on the cores closest to its GPU(s) (recipes/lumi-g.yaml:56 node.gpu_cores); partition standard-g gives whole nodes (recipes/lumi-g.yaml:66 partitions.standard-g)
#   OMP_NUM_THREADS=7: 56 CPUs / 8 processes
#   --kill-on-bad-exit=1: a crashed rank ends the whole step instead of leaving the others hanging
#   c10d rendezvous: torchrun --nnodes=$SLURM_STEP_NUM_NODES --rdzv-id=$SLURM_JOB_ID --rdzv-endpoint=<first node>:<20000 + job id based port> (as PET_* variables, so options you give torchrun still win)
#   SLURM_NTASKS unset inside the step: it counts launchers, not ranks, and Lightning versions that check Slurm first would take the world size from it instead of torchrun's
#   job report: one sampler per node (the node's first task starts it) reads the step's GPUs and CPUs every few seconds; envrun prints the summary when the step ends (--no-report: none)
#   $WITH_CONDA is evaluated inside the container when the image sets it (LUMI PyTorch images), by bash when the image has it; envrun stops if the activation fails
#   MIOPEN_USER_DB_PATH=/tmp/${USER}-miopen-cache-${SLURM_NODEID}: recipes/lumi-g.yaml:88 env.MIOPEN_USER_DB_PATH, expanded in each task
#   MIOPEN_CUSTOM_CACHE_DIR=/tmp/${USER}-miopen-cache-${SLURM_NODEID}: recipes/lumi-g.yaml:89 env.MIOPEN_CUSTOM_CACHE_DIR, expanded in each task
#   per-rank CPU affinity 0:49,50,51,52,53,54,55;1:57,58,59,60,61,62,63;2:17,18,19,20,21,22,23;3:25,26,27,28,29,30,31;4:1,2,3,4,5,6,7;5:9,10,11,12,13,14,15;6:33,34,35,36,37,38,39;7:41,42,43,44,45,46,47, applied before each rank's Python starts
#   TOKENIZERS_PARALLELISM=false: tokenizer threads would fight the DataLoader workers after fork
#   NCCL_SOCKET_IFNAME: recipes/lumi-g.yaml:81 env.NCCL_SOCKET_IFNAME
#   FI_MR_CACHE_MONITOR: recipes/lumi-g.yaml:86 env.FI_MR_CACHE_MONITOR
#   apptainer --quiet: without its INFO lines, which say nothing about this run (warnings and errors still show; envrun -v keeps them)
#   binds /pfs, /scratch, /projappl, /project, /flash, /appl, /var/spool/slurmd, /opt/cray, /usr/lib64/libcxi.so.1, /usr/lib64/libjansson.so.4: recipes/lumi-g.yaml:78 binds
#   envrun waits for srun and names the cause in one line when the step fails (a rank's exit code or signal, a time limit, a failed node), read from srun's exit status and messages
#   the job report goes to %x-%j.report/ (report.json, report.html, timeline.png, summary.txt), next to the job's output; its summary ends the output
envrun --system lumi-g --image /appl/local/laifs/containers/lumi-multitorch-latest.sif --report %x-%j.report srun torchrun train.py --epochs 10 &
step=$!
# wait returns early when the trap runs: wait again until the step itself has ended
while :; do interrupted=0; wait "$step"; status=$?; [ "$interrupted" = 1 ] || break; done
[ -n "$watchdog" ] && kill "$watchdog" 2>/dev/null
if [ "$checkpoint" = 1 ]; then
    echo "envrun: the training step ended with status $status after the checkpoint request" >&2
    requeue_job && status=0
fi
exit "$status"
