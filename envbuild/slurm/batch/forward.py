"""`envrun signal-ranks SIGNAL DIR`: run once per node by a requeue job's trap (envbuild.slurm.batch.requeue), it
sends SIGNAL to the training processes envrun recorded on this node as it started them.

Records are empty files DIR/<node>.<pid>.<kind>: `rank` for a training process itself (torchrun's ranks,
`srun python` tasks), `children` for a launcher whose workers envrun does not start (accelerate, deepspeed):
its direct children get the signal — not the launcher (it would die of it and leave its workers behind), and
not the children's own children (DataLoader workers die of an unexpected SIGUSR1).
Containers share the host's process ids (apptainer starts no PID namespace unless asked with --pid).
"""

from __future__ import annotations

import os
import signal as signals

from envbuild.shared.errors import UsageError


def children_map(proc: str = "/proc") -> dict[int, list[int]]:
    """parent pid -> child pids, from /proc/<pid>/stat."""
    tree: dict[int, list[int]] = {}
    for entry in os.listdir(proc):
        if not entry.isdigit():
            continue
        try:
            with open(f"{proc}/{entry}/stat") as handle:
                # the command name may hold spaces and parentheses: the fields after the last ')' are fixed
                fields = handle.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        tree.setdefault(int(fields[1]), []).append(int(entry))
    return tree


def targets(directory: str, node: str, tree: dict[int, list[int]]) -> list[int]:
    """The processes to signal on `node`, from the records in `directory`."""
    pids: list[int] = []
    try:
        entries = sorted(os.listdir(directory))
    except OSError:
        return pids
    for entry in entries:
        name, _, rest = entry.partition(".")
        pid_text, _, kind = rest.partition(".")
        if name != node or not pid_text.isdigit():
            continue
        pid = int(pid_text)
        pids += tree.get(pid, []) if kind == "children" else [pid]
    return list(dict.fromkeys(pids))


def signal_ranks(signal_name: str, directory: str, node: str | None = None) -> int:
    """Send the signal; the number of processes reached. Prints one line per node for the job's log."""
    name = signal_name.upper().removeprefix("SIG")
    number = getattr(signals, f"SIG{name}", None)
    if number is None:
        raise UsageError(f"unknown signal {signal_name}", "e.g. USR1")
    node = node or os.environ.get("SLURMD_NODENAME") or os.uname().nodename
    reached = []
    for pid in targets(directory, node, children_map()):
        try:
            os.kill(pid, number)
            reached.append(pid)
        except (ProcessLookupError, PermissionError):
            pass
    print(f"envrun: {node}: SIG{name} sent to {len(reached)} training process(es)"
          + (f" ({', '.join(map(str, reached))})" if reached else ""), flush=True)
    return len(reached)
