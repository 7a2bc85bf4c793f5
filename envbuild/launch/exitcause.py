"""Why a job step failed, in one line, from srun's exit status and the messages that passed through its stderr.

Read only after srun has ended (envbuild.launch.supervise), so it may import `re`. The messages it reads
(Slurm 22.05-24.x; torch elastic's ChildFailedError, also printed by `accelerate launch`):

    srun: error: node2: task 1: Exited with exit code 3          a task's exit code
    srun: error: node1: tasks 0-1: Segmentation fault             a task killed by a signal (strsignal text)
    srun: error: node1: task 0: Out Of Memory                     the kernel's OOM killer, seen by Slurm
    slurmstepd: error: *** STEP 12.0 ON node1 CANCELLED AT 2026-11-24T01:26:48 DUE TO TIME LIMIT ***
    slurmstepd: error: *** JOB 12 ON node1 CANCELLED AT ... DUE TO NODE FAILURE ***
    srun: error: Node failure on node2                         (once slurmctld has marked the node down)
    Root Cause (first observed failure): ... rank : 1 (local_rank: 1) ... exitcode : -11 (pid: 123) (SIGSEGV)
    FATAL:   could not open image /x.sif: ...                      apptainer / singularity could not start

With --kill-on-bad-exit the first task that fails is the cause; the tasks srun ends after it
("Terminated", "Killed") and the step's "CANCELLED" line that follows are consequences, and are named as such.
Where the messages do not say, the line says only what srun's exit status says.
"""

from __future__ import annotations

import re

_TASK = re.compile(r"^srun: error: (?P<node>\S+): (?P<tasks>tasks? [\d,\-\[\]]+): (?P<what>.+?)\s*$")
_CANCEL = re.compile(r"\*\*\* (?P<kind>STEP|JOB) (?P<id>\S+) ON (?P<node>\S+) CANCELLED AT \S+(?: DUE TO (?P<due>[A-Z ]+?))?"
                     r"(?: \*\*\*|$)")
_NODE_FAIL = re.compile(r"^srun: error: (?:Node failure on (?P<node>\S+)|.*io error and missing step on node)")
_EXIT = re.compile(r"Exited with exit code (\d+)")
_SIGNAL_NAMES = {
    "Hangup": "SIGHUP", "Interrupt": "SIGINT", "Quit": "SIGQUIT", "Illegal instruction": "SIGILL", "Aborted": "SIGABRT",
    "Bus error": "SIGBUS", "Floating point exception": "SIGFPE", "Killed": "SIGKILL", "Segmentation fault": "SIGSEGV",
    "Terminated": "SIGTERM", "User defined signal 1": "SIGUSR1", "User defined signal 2": "SIGUSR2",
}
_AFTERMATH = ("Terminated", "Killed")  # what srun does to the other tasks once one has failed
_DEFAULT_SIGNALS = {1: "SIGHUP", 2: "SIGINT", 3: "SIGQUIT", 6: "SIGABRT", 9: "SIGKILL", 11: "SIGSEGV", 15: "SIGTERM"}


def keep_line(line: str) -> bool:
    """Whether a line of srun's stderr may matter for the cause (envbuild.launch.supervise keeps only these)."""
    return line.startswith(("srun: ", "slurmstepd", "FATAL:", "Root Cause", "  rank ", "  exitcode", "  host ")) \
        or "*** STEP" in line or "*** JOB" in line


def explain(lines: list[str], code: int, step: str, time_limit: str = "") -> str:
    """One line for an srun that ended with `code` (its exit code, or -N for signal N); "" for success.
    `step`: what each task ran ("torchrun", "accelerate", "deepspeed", or "rank": one task per rank)."""
    if code == 0:
        return ""
    status = f"srun exit status {code}" if code > 0 else f"srun ended by {_DEFAULT_SIGNALS.get(-code, f'signal {-code}')}"
    return f"envrun: the job step failed ({status}): {_cause(lines, code, step, time_limit)}"


def _cause(lines: list[str], code: int, step: str, time_limit: str) -> str:
    cancel = next((m for m in map(_CANCEL.search, lines) if m), None)
    due = (cancel.group("due") or "").strip() if cancel else ""
    what = "step" if cancel is not None and cancel.group("kind") == "STEP" else "job"
    if due == "TIME LIMIT":
        limit = time_limit if what == "step" and time_limit else ("srun --time" if what == "step" else "its --time")
        return f"the {what} reached its time limit ({limit}); Slurm stopped every task (SIGTERM, then SIGKILL after KillWait)"
    node_fail = next((m for m in map(_NODE_FAIL.search, lines) if m), None)
    if due == "NODE FAILURE" or node_fail is not None:
        node = (node_fail.group("node") if node_fail else None) or (cancel.group("node") if cancel else None)
        return (f"node {node or '(unnamed)'} failed or lost contact (its slurmd or step daemon is gone); "
                "srun ended the step on the other nodes")
    if due:
        return f"Slurm cancelled the {what} ({due.lower()})"
    first = _first_failure(lines)
    fatal = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("FATAL:")), "")
    if first is not None:
        index, node, tasks, happened = first
        cancelled_first = cancel is not None and lines.index(cancel.string) < index
        if cancelled_first and happened.startswith(_AFTERMATH):
            return f"the {what} was cancelled (scancel, or its job ended); srun then reported: {tasks} on {node}: {happened}"
        cause = _task_cause(lines, node, tasks, happened, step)
        if fatal:
            cause += f"; the container runtime said: {fatal}"
        return cause + ("; srun then ended the step (--kill-on-bad-exit)" if _others_ended(lines, index) else "")
    if cancel is not None:
        return f"the {what} was cancelled on {cancel.group('node')} (scancel, or its job ended)"
    if fatal:
        return f"the container runtime could not start: {fatal}"
    error = next((line for line in lines if line.startswith("srun: error: ")), "")
    if error:
        return f"srun said: {error.removeprefix('srun: error: ')}"
    if code < 0:
        return "srun itself was stopped by a signal (envrun's, scancel's or the terminal's)"
    return "srun gave no reason in its messages; see the output above"


def cause_exit_code(lines: list[str], code: int) -> int:
    """The exit status envrun gives for a failed step: the first failing task's own exit code where it exited
    with one and srun then ended the others (srun's own status is then the terminated tasks' 143, which says
    only that srun stopped them, and depends on which task was still running); else srun's `code`."""
    if code == 0:
        return code
    first = _first_failure(lines)
    if first is None:
        return code
    index, _node, _tasks, happened = first
    exit_code = _EXIT.search(happened)
    if exit_code is None or not _others_ended(lines, index):
        return code
    return int(exit_code.group(1)) or code


def _first_failure(lines: list[str]) -> tuple[int, str, str, str] | None:
    for index, line in enumerate(lines):
        match = _TASK.match(line)
        if match:
            return index, match.group("node"), match.group("tasks"), match.group("what")
    return None


def _others_ended(lines: list[str], index: int) -> bool:
    later = lines[index + 1 :]
    return any("Terminating StepId" in line or "CANCELLED AT" in line for line in later) or any(
        (m := _TASK.match(line)) is not None and m.group("what").startswith(_AFTERMATH) for line in later)


def _task_cause(lines: list[str], node: str, tasks: str, happened: str, step: str) -> str:
    exit_code = _EXIT.search(happened)
    if exit_code:
        outcome = f"exited with code {exit_code.group(1)}"
    elif happened.startswith("Out Of Memory"):
        outcome = "ran out of memory (the kernel's OOM killer; ask for more --mem)"
    else:
        outcome = f"was killed by {_SIGNAL_NAMES.get(happened, happened)} ({happened})"
    if step == "rank":  # one task per rank: the task number is the rank (RANK=$SLURM_PROCID)
        return f"{tasks.replace('task', 'rank')} ({tasks} on {node}) {outcome}"
    root = _root_cause(lines)
    if root is not None and step in ("torchrun", "accelerate"):
        rank, local, host, rank_outcome = root
        where = node if host in ("", "localhost") else host
        return (f"rank {rank} (local rank {local} on {where}) {rank_outcome}, as {step} reports; {step} ({tasks} "
                f"on {node}) then {outcome}")
    return f"{tasks} on {node} ({step or 'the program'}) {outcome}"


def _root_cause(lines: list[str]) -> tuple[str, str, str, str] | None:
    """(rank, local rank, host, what happened) from the first ChildFailedError's "Root Cause" block."""
    try:
        start = next(i for i, line in enumerate(lines) if line.startswith("Root Cause"))
    except StopIteration:
        return None
    fields: dict[str, str] = {}
    for line in lines[start + 1 : start + 12]:
        key, sep, value = line.strip().partition(":")
        if sep and key.strip() in ("rank", "exitcode", "host") and key.strip() not in fields:
            fields[key.strip()] = value.strip()
    rank = re.match(r"(\d+) \(local_rank: (\d+)\)", fields.get("rank", ""))
    code = re.match(r"(-?\d+)", fields.get("exitcode", ""))
    if rank is None or code is None:
        return None
    status = int(code.group(1))
    if status < 0:
        name = re.search(r"\((SIG[A-Z0-9]+)\)", fields["exitcode"])
        outcome = f"was killed by {name.group(1) if name else f'signal {-status}'}"
    else:
        outcome = f"exited with code {status}"
    return rank.group(1), rank.group(2), fields.get("host", ""), outcome
