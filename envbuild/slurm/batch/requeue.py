"""`--requeue`: checkpoint before the time limit, inside the container, and come back. Pure (script lines).

Slurm sends the signal to the batch shell only (`--signal=B:USR1@90`): torchrun does not pass USR1 on to
its workers (pytorch #154849), and a signal to the whole step would reach torchrun and the container
runtime as well. So the script traps it and
  1. runs `envrun signal-ranks` once per node (srun --overlap), which sends the signal to the training
     processes envrun recorded in $ENVRUN_SIGNAL_DIR as it started them (the ranks, not their launchers),
  2. then creates $ENVRUN_CHECKPOINT_FILE (on the shared file system: every rank on every node can test for
     it). The signal goes first: a rank that sees the file saves and exits, and Python puts SIGUSR1 back to
     its default action (terminate) while it shuts down (_PySignal_Fini), so a signal that lands then kills
     a rank that had finished cleanly (CI, 2026-11-23: exitcode -10 after "CHECKPOINT at step 196").
     A rank without a handler ignores the signal: the rank shim starts it with USR1 ignored.
  3. waits for the step to end (the ranks save and exit), bounded by a watchdog that requeues anyway
     shortly before the limit, and
  4. requeues the job while $SLURM_RESTART_COUNT is below the limit, as submitit and Lightning do.
The training script's side: `if os.path.exists(os.environ.get("ENVRUN_CHECKPOINT_FILE", "")): save; exit 0`
in its loop, or a SIGUSR1 handler; $ENVRUN_RESTART says which run this is (0 first).
"""

from __future__ import annotations

from shlex import quote

TYPE_CHECKING = False
if TYPE_CHECKING:
    from envbuild.slurm.batch.jobplan import Requeue

# The watchdog leaves this much of the grace period for Slurm to requeue before the limit kills the job.
REQUEUE_MARGIN_S = 15


def requeue_setup(requeue: Requeue, envrun: str) -> list[str]:
    signal, grace, limit = requeue.signal, requeue.grace_s, requeue.max_restarts
    watchdog = max(1, grace - REQUEUE_MARGIN_S)
    return [
        "",
        f"# --requeue: {signal} arrives {grace} s before the time limit. The training is asked to checkpoint: the file",
        f"# $ENVRUN_CHECKPOINT_FILE appears and each rank gets SIG{signal}. When the step has ended the job requeues",
        f"# itself, at most {limit} times ($SLURM_RESTART_COUNT); $ENVRUN_RESTART tells the run which one it is.",
        'export ENVRUN_RESTART="${SLURM_RESTART_COUNT:-0}"',
        'envrun_job_dir="$PWD/.envrun/job-$SLURM_JOB_ID"',
        'export ENVRUN_CHECKPOINT_FILE="$envrun_job_dir/checkpoint-now"',
        'export ENVRUN_SIGNAL_DIR="$envrun_job_dir/ranks"',
        "# The job's own directory, made afresh and private (0700): the submission directory may be a group's, and",
        "# what another member left at this name goes (rm removes a link, never its target) or stops the job here.",
        'mkdir -p -m 700 "$PWD/.envrun" && rm -rf "$envrun_job_dir" && mkdir -m 700 "$envrun_job_dir" "$ENVRUN_SIGNAL_DIR" || {',
        '    echo "envrun: cannot make the job\'s private directory $envrun_job_dir: fix: submit from a directory where" \\',
        '         "no other user writes .envrun" >&2; exit 1; }',
        '[ "$ENVRUN_RESTART" = 0 ] || echo "envrun: job $SLURM_JOB_ID is back: restart $ENVRUN_RESTART" >&2',
        "checkpoint=0 interrupted=0 watchdog=",
        "requeue_job() {",
        f'    if [ "${{SLURM_RESTART_COUNT:-0}}" -ge {limit} ]; then',
        f'        echo "envrun: not requeueing: the job was restarted {limit} times already (--requeue-max)" >&2',
        "        return 1",
        "    fi",
        f'    echo "envrun: requeueing job $SLURM_JOB_ID (restart $(( ${{SLURM_RESTART_COUNT:-0}} + 1 )) of {limit})" >&2',
        '    scontrol requeue "$SLURM_JOB_ID"',
        "}",
        "checkpoint_now() {",
        "    checkpoint=1 interrupted=1",
        f'    echo "envrun: $(date +%T) {signal}: the time limit is {grace} s away; asking the ranks to checkpoint" >&2',
        '    srun --overlap --ntasks="$SLURM_JOB_NUM_NODES" --ntasks-per-node=1 '
        f'{quote(envrun)} signal-ranks {signal} "$ENVRUN_SIGNAL_DIR" >&2 || '
        'echo "envrun: could not signal the ranks; they still see $ENVRUN_CHECKPOINT_FILE" >&2',
        "    # the file after the signal: a rank that leaves on the file alone must not meet the signal as it exits;",
        "    # made only in the job's own directory (another member may have swapped it since; never through a link)",
        '    if [ -O "$envrun_job_dir" ] && [ ! -L "$envrun_job_dir" ] && [ ! -L "$ENVRUN_CHECKPOINT_FILE" ]; then',
        '        : > "$ENVRUN_CHECKPOINT_FILE"',
        "    else",
        '        echo "envrun: $envrun_job_dir is no longer this job\'s own directory: no checkpoint file made" >&2',
        "    fi",
        f'    ( sleep {watchdog}; echo "envrun: the step did not end within {watchdog} s of the signal" >&2; requeue_job ) &',
        "    watchdog=$!",
        "}",
        f"trap checkpoint_now {signal}",
    ]


def requeue_wait(step: str) -> list[str]:
    """The step in the background, so that the trap runs while it trains."""
    return [
        f"{step} &",
        "step=$!",
        "# wait returns early when the trap runs: wait again until the step itself has ended",
        'while :; do interrupted=0; wait "$step"; status=$?; [ "$interrupted" = 1 ] || break; done',
        '[ -n "$watchdog" ] && kill "$watchdog" 2>/dev/null',
    ]


def requeue_decision() -> list[str]:
    """After the step (and any cleanup: a requeue ends this run at once)."""
    return [
        'if [ "$checkpoint" = 1 ]; then',
        '    echo "envrun: the training step ended with status $status after the checkpoint request" >&2',
        "    requeue_job && status=0",
        "fi",
    ]
