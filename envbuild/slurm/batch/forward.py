"""`envrun signal-ranks SIGNAL DIR`: run once per node by a requeue job's trap (envbuild.slurm.batch.requeue), it
sends SIGNAL to the training processes envrun recorded on this node as it started them.

Records are empty files DIR/<node>.<pid>.<kind>: `rank` for a training process itself (torchrun's ranks,
`srun python` tasks), `children` for a launcher whose workers envrun does not start (accelerate, deepspeed):
its direct children get the signal — not the launcher (it would die of it and leave its workers behind), and
not the children's own children (DataLoader workers die of an unexpected SIGUSR1).
Containers share the host's process ids (apptainer starts no PID namespace unless asked with --pid).

The records sit in the job's directory under the submission directory, which may be a group project others
can write. What keeps another member from turning the trap against the user's own processes (a record naming
the pid of the user's Jupyter server, SIGUSR1 ends it): the directory is read through one descriptor opened
without following a link and must be the user's and writable by nobody else (the script makes it 0700), and a
recorded process gets the signal only when it belongs to this job (its SLURM_JOB_ID is the trap's).
"""

from __future__ import annotations

import os
import signal as signals
import stat

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


def private_records(directory: str) -> list[str]:
    """The names in the records directory, read through one descriptor of it; [] when it is missing. A link
    there, or a directory that is not the caller's or that others may write, is refused: its records could
    name any of the user's processes."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise UsageError(f"{directory}: cannot open the job's records of its training processes as a directory "
                         f"({exc.strerror}; a link planted there?)",
                         "the job makes it itself (mkdir -m 700) when it starts: resubmit the job; if a link "
                         "or file keeps appearing at that name, another user writes the directory above it") from exc
    try:
        info = os.fstat(fd)
        if info.st_uid != os.geteuid() or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            raise UsageError(f"{directory}: the job's records of its training processes are in a directory "
                             f"{'another user owns' if info.st_uid != os.geteuid() else 'others may write'} "
                             f"(mode {stat.S_IMODE(info.st_mode):04o}, owner uid {info.st_uid}): not read, "
                             "nothing signalled", "the job makes it itself, 0700, when it starts: resubmit the job "
                             "from a directory where no other user can replace .envrun")
        return sorted(os.listdir(fd))
    finally:
        os.close(fd)


def job_of(pid: int, proc: str = "/proc") -> str | None:
    """SLURM_JOB_ID in a process's environment as it started; None where it has none or cannot be read."""
    try:
        with open(f"{proc}/{pid}/environ", "rb") as handle:
            data = handle.read()
    except OSError:
        return None
    for entry in data.split(b"\0"):
        if entry.startswith(b"SLURM_JOB_ID="):
            return entry.partition(b"=")[2].decode("ascii", "replace")
    return None


def targets(entries: list[str], node: str, tree: dict[int, list[int]]) -> list[int]:
    """The processes to signal on `node`, from the record names `entries`."""
    pids: list[int] = []
    for entry in entries:
        name, _, rest = entry.partition(".")
        pid_text, _, kind = rest.partition(".")
        if name != node or not pid_text.isdigit():
            continue
        pid = int(pid_text)
        pids += tree.get(pid, []) if kind == "children" else [pid]
    return list(dict.fromkeys(pids))


def signal_ranks(signal_name: str, directory: str, node: str | None = None, proc: str = "/proc") -> int:
    """Send the signal; the number of processes reached. Prints one line per node for the job's log. Where the
    trap runs inside a job (SLURM_JOB_ID set), a recorded process of another job, or of none, is left alone."""
    name = signal_name.upper().removeprefix("SIG")
    number = getattr(signals, f"SIG{name}", None)
    if number is None:
        raise UsageError(f"unknown signal {signal_name}", "e.g. USR1")
    node = node or os.environ.get("SLURMD_NODENAME") or os.uname().nodename
    job = os.environ.get("SLURM_JOB_ID")
    reached, foreign = [], []
    for pid in targets(private_records(directory), node, children_map(proc)):
        if job and job_of(pid, proc) != job:
            foreign.append(pid)
            continue
        try:
            os.kill(pid, number)
            reached.append(pid)
        except (ProcessLookupError, PermissionError):
            pass
    print(f"envrun: {node}: SIG{name} sent to {len(reached)} training process(es)"
          + (f" ({', '.join(map(str, reached))})" if reached else ""), flush=True)
    if foreign:
        print(f"envrun: {node}: not signalled: {', '.join(map(str, foreign))}, recorded but not processes of job "
              f"{job}", flush=True)
    return len(reached)
