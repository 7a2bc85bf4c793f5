"""envrun's one-line cause for a failed srun step, from the lines srun's stderr carried. The inputs are what
Slurm 22.05 and torch 2.x printed on the local test cluster (tests/e2e/test_launch_faults.py makes them for real)."""

from __future__ import annotations

import pytest

from envbuild.launch.exitcause import explain, keep_line

TORCHRUN_RANK_EXIT = """\
W1124 01:25:09.168000 11893 torch/distributed/elastic/multiprocessing/api.py:1028] Sending process 11946 closing signal SIGTERM
Failures:
[1]:
  time      : 2026-11-24_01:25:09
  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 11946)  (SIGTERM)
  error_file: <N/A>
  traceback : Signal 15 (SIGTERM) received by PID 11946
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-24_01:25:09
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : 3 (pid: 11947)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
============================================================
srun: error: vm: task 0: Exited with exit code 1
srun: launch/slurm: _step_signal: Terminating StepId=976.0
"""
TORCHRUN_RANK_SEGV = TORCHRUN_RANK_EXIT.replace("exitcode  : 3 (pid: 11947)", "exitcode  : -11 (pid: 12937)  (SIGSEGV)")
TASK_EXIT = """\
rank 1 output
srun: error: vm: task 1: Exited with exit code 3
srun: launch/slurm: _step_signal: Terminating StepId=977.0
slurmstepd-vm: error: *** STEP 977.0 ON vm CANCELLED AT 2026-11-24T01:25:15 ***
srun: error: vm: task 0: Terminated
srun: Force Terminated StepId=977.0
"""
TASK_SEGV = TASK_EXIT.replace("task 1: Exited with exit code 3", "task 1: Segmentation fault")
TIME_LIMIT = """\
slurmstepd-vm: error: *** STEP 980.0 ON vm CANCELLED AT 2026-11-24T01:26:48 DUE TO TIME LIMIT ***
srun: Job step aborted: Waiting up to 7 seconds for job step to finish.
torch.distributed.elastic.multiprocessing.api.SignalException: Process 13347 got signal: 15
srun: error: vm: task 0: Exited with exit code 1
srun: launch/slurm: _step_signal: Terminating StepId=980.0
"""
NODE_FAILURE = """\
[rank1]: RuntimeError: [../gloo/transport/tcp/pair.cc:553] Connection closed by peer [10.77.0.12]:46263.
Root Cause (first observed failure):
[0]:
  host      : node1
  rank      : 1 (local_rank: 1)
  exitcode  : 1 (pid: 23160)
srun: error: node1: task 0: Exited with exit code 1
srun: launch/slurm: _step_signal: Terminating StepId=986.0
srun: error: Node failure on node2
srun: error: Node failure on node2
"""
SCANCEL = """\
srun: Job step aborted: Waiting up to 7 seconds for job step to finish.
slurmstepd-vm: error: *** STEP 989.0 ON vm CANCELLED AT 2026-11-24T01:35:52 ***
srun: error: vm: tasks 0-1: Terminated
srun: launch/slurm: _step_signal: Terminating StepId=989.0
"""
IMAGE_GONE = """\
FATAL:   While checking container encryption: could not open image /tmp/lf/missing.sif: failed to retrieve path for \
/tmp/lf/missing.sif: lstat /tmp/lf/missing.sif: no such file or directory
srun: error: vm: task 0: Exited with exit code 255
"""


def cause(text: str, code: int, step: str = "rank", time_limit: str = "") -> str:
    lines = [line for line in text.splitlines() if keep_line(line)]
    return explain(lines, code, step, time_limit)


@pytest.mark.parametrize(("text", "code", "step", "expected"), [
    (TORCHRUN_RANK_EXIT, 1, "torchrun",
     "envrun: the job step failed (srun exit status 1): rank 1 (local rank 1 on vm) exited with code 3, as torchrun "
     "reports; torchrun (task 0 on vm) then exited with code 1; srun then ended the step (--kill-on-bad-exit)"),
    (TORCHRUN_RANK_SEGV, 1, "torchrun",
     "envrun: the job step failed (srun exit status 1): rank 1 (local rank 1 on vm) was killed by SIGSEGV, as torchrun "
     "reports; torchrun (task 0 on vm) then exited with code 1; srun then ended the step (--kill-on-bad-exit)"),
    (TASK_EXIT, 143, "rank",
     "envrun: the job step failed (srun exit status 143): rank 1 (task 1 on vm) exited with code 3; srun then ended "
     "the step (--kill-on-bad-exit)"),
    (TASK_SEGV, 143, "rank",
     "envrun: the job step failed (srun exit status 143): rank 1 (task 1 on vm) was killed by SIGSEGV (Segmentation "
     "fault); srun then ended the step (--kill-on-bad-exit)"),
    (TIME_LIMIT, 1, "torchrun",
     "envrun: the job step failed (srun exit status 1): the step reached its time limit (--step-timeout 1m = srun "
     "--time=00:01:00); Slurm stopped every task (SIGTERM, then SIGKILL after KillWait)"),
    (NODE_FAILURE, 1, "torchrun",
     "envrun: the job step failed (srun exit status 1): node node2 failed or lost contact (its slurmd or step daemon "
     "is gone); srun ended the step on the other nodes"),
    (SCANCEL, 143, "rank",
     "envrun: the job step failed (srun exit status 143): the step was cancelled (scancel, or its job ended); srun "
     "then reported: tasks 0-1 on vm: Terminated"),
    (IMAGE_GONE, 255, "torchrun",
     "envrun: the job step failed (srun exit status 255): task 0 on vm (torchrun) exited with code 255; the container "
     "runtime said: While checking container encryption: could not open image /tmp/lf/missing.sif: failed to retrieve "
     "path for /tmp/lf/missing.sif: lstat /tmp/lf/missing.sif: no such file or directory"),
])
def test_the_cause_is_named(text: str, code: int, step: str, expected: str) -> None:
    assert cause(text, code, step, "--step-timeout 1m = srun --time=00:01:00") == expected


def test_success_says_nothing() -> None:
    assert cause("srun: error: vm: task 0: Exited with exit code 3\n", 0) == ""


def test_the_jobs_time_limit_and_other_slurm_reasons() -> None:
    job = "slurmstepd: error: *** JOB 12 ON n1 CANCELLED AT 2026-11-24T01:26:48 DUE TO TIME LIMIT ***\n"
    assert "the job reached its time limit (its --time)" in cause(job, 143)
    preempted = "slurmstepd: error: *** JOB 12 ON n1 CANCELLED AT 2026-11-24T01:26:48 DUE TO PREEMPTION ***\n"
    assert cause(preempted, 143).endswith("Slurm cancelled the job (preemption)")
    failed = "slurmstepd: error: *** JOB 12 ON n1 CANCELLED AT 2026-11-24T01:26:48 DUE TO NODE FAILURE ***\n"
    assert "node n1 failed or lost contact" in cause(failed, 1)


def test_oom_and_unknown_signals() -> None:
    assert "rank 2 (task 2 on n3) ran out of memory" in cause("srun: error: n3: task 2: Out Of Memory\n", 137)
    assert "rank 0 (task 0 on n3) was killed by SIGKILL (Killed)" in cause("srun: error: n3: task 0: Killed\n", 137)
    assert "was killed by Power failure (Power failure)" in cause("srun: error: n3: task 0: Power failure\n", 158)


def test_only_what_srun_says_when_no_task_failed() -> None:
    assert cause("srun: error: Unable to allocate resources: Invalid partition name specified\n", 1) == (
        "envrun: the job step failed (srun exit status 1): srun said: Unable to allocate resources: Invalid partition "
        "name specified")
    assert cause("some output\n", 7).endswith("srun gave no reason in its messages; see the output above")
    assert cause("", -15) == ("envrun: the job step failed (srun ended by SIGTERM): srun itself was stopped by a "
                              "signal (envrun's, scancel's or the terminal's)")


def test_accelerate_and_deepspeed_steps() -> None:
    assert "as accelerate reports; accelerate (task 0 on vm)" in cause(TORCHRUN_RANK_EXIT, 1, "accelerate")
    assert cause(TORCHRUN_RANK_EXIT, 1, "deepspeed").startswith(
        "envrun: the job step failed (srun exit status 1): task 0 on vm (deepspeed) exited with code 1")


def test_user_output_that_looks_like_a_root_cause_block_is_not_read_outside_one() -> None:
    text = "  rank      : 7 (local_rank: 7)\n  exitcode  : 9\nsrun: error: vm: task 0: Exited with exit code 2\n"
    assert cause(text, 2, "torchrun").endswith("task 0 on vm (torchrun) exited with code 2")


def test_the_exit_status_is_the_first_failing_tasks_own() -> None:
    """srun's status is 143 when it terminated a task that was still running after another exited with 1: the
    job's status is the cause's, 1 (it depends on no race between the tasks)."""
    from envbuild.launch.exitcause import cause_exit_code

    lines = ["srun: error: vm: task 0: Exited with exit code 1", "srun: launch/slurm: _step_signal: Terminating StepId=402.0",
             "slurmstepd-vm: error: *** STEP 402.0 ON vm CANCELLED AT 2026-11-28T14:51:47 ***",
             "srun: error: vm: task 1: Terminated"]
    assert cause_exit_code(lines, 143) == 1
    assert cause_exit_code(lines[:1], 1) == 1
    assert cause_exit_code(["srun: error: vm: task 0: Segmentation fault"], 139) == 139  # a signal: srun's own
    assert cause_exit_code([], 2) == 2
