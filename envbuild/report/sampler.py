"""The per-node sampler of the job report: what the step's ranks and the node's GPUs use, every interval.

envrun's host shim starts it in the background in the first task of every node (record.md):

    PYTHON -I -c BOOT ROOT envbuild.report.sampler --interval SECONDS --task-pid $$ --step-pid $PPID <<KEY

(the words from envbuild.commands.launch.report_sampler: isolated from the working directory by
envbuild.host.pythonstart), with the step's key on its stdin
(envbuild.launch.shims.sampler_start_lines): never on its argv or in its environment, which the program
could read. It writes a start record, a sample every interval and an end record into its stderr, which is
the task's stderr: srun carries it back to envrun's step supervisor. Every record is framed with the key by
wire.encode (envrun takes only the lines with its key for records) and written with one os.write per line,
so a record is never interleaved with the program's output.

It must never harm the step: it does not raise into the user's stderr (at most one line saying what went
wrong), it exits 0, and it ends by itself when the task it watches ends (its parent, the task's root,
is gone) or on SIGTERM/SIGHUP/SIGINT, so nothing is left running after the step.

Light: os, signal, sys, time, json (through wire) and the /proc reader; the GPU reader is imported
only when the sampler starts, and a missing one means "no GPU source".
"""

from __future__ import annotations

import os
import select
import signal
import sys
import time

from envbuild.report import wire
from envbuild.report.procs import PROC, StepProcs, read_allowed_cpus, read_load1, read_stat

TYPE_CHECKING = False  # mypy reads the block below; at run time the sampler does without the typing module
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import Protocol

    class GpuSource(Protocol):
        """What the sampler needs of a GPU reader (envbuild.report.gpus.open_gpu_source gives one)."""

        @property
        def name(self) -> str | None: ...
        @property
        def note(self) -> str: ...
        def names(self) -> Sequence[Mapping[str, object]]: ...
        def read(self) -> Sequence[Mapping[str, object]]: ...
        def close(self) -> None: ...

# How often, between samples, the sampler looks whether the task has ended: srun waits for the sampler's end
# record (it holds the task's stderr) before the step ends, so this is what the report adds to every step's
# end at most; the look is one getppid() while the sampler is the task's child. Where the kernel cannot tell
# the sampler when a rank's main process exits (no pidfd), the ranks' main processes are read this often too,
# so that a rank's last read is at most this old.
TASK_CHECK_S = 0.1

# The samples come densely at first and then further apart, up to the interval: the gap is the time since the
# start over DENSE_SHARE, at least MIN_GAP_S. A short step (a few seconds) gets a true shape and its ranks are
# seen from their start (the exec that gives them RANK falls between two close reads); a day-long one costs
# a few dozen extra records in its first minute. GPUs are read at the interval only: their tools cost more.
MIN_GAP_S = 0.1
DENSE_SHARE = 10.0
# After a rank's main process exits the next sample comes this soon, so that the ranks that end together
# share one record.
RANK_END_SAMPLE_S = 0.05
# When the sampler's own task has ended, how long it waits for the ranks of the node's other tasks to end
# before its end record (a rank still running then is reported as running, with its total so far).
OTHER_TASKS_WAIT_S = 1.0

# Why the last record was written (its "reason"). STDERR_CLOSED is named for the contract; a sampler whose
# stderr is closed cannot write it, so it ends without an end record.
TASK_ENDED = "task-ended"
SIGNAL = "signal"
STDERR_CLOSED = "stderr-closed"

_STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)


class NoGpus:
    """The GPU source of a sampler that has none: it says why in its note."""

    def __init__(self, note: str) -> None:
        self.name: str | None = None
        self.note = note

    def names(self) -> list[dict[str, object]]:
        return []

    def read(self) -> list[dict[str, object]]:
        return []

    def close(self) -> None:
        return None


class _Stop(BaseException):
    """Raised by the signal handler to leave whatever the sampler waits in (sleep, a read)."""


class _StderrGone(Exception):
    """The sampler's stderr is closed: no record can reach envrun any more."""


def open_gpus(environ: dict[str, str]) -> GpuSource:
    """The node's GPU reader; NoGpus when the reader module is missing or fails to open."""
    try:
        from envbuild.report.gpus import open_gpu_source
    except ImportError as error:
        return NoGpus(f"no GPU reader in this envbuild ({error})")
    try:
        source: GpuSource = open_gpu_source(environ)
    except Exception as error:  # noqa: BLE001 - a GPU reader that fails costs the GPU columns, never the step
        return NoGpus(f"the GPU reader failed to start: {error}")
    return source


def node_name(environ: dict[str, str]) -> str:
    """The node's name as Slurm calls it, else the host name (what socket.gethostname() returns)."""
    return environ.get("SLURMD_NODENAME") or os.uname().nodename


def node_cpus(environ: dict[str, str], step_pid: int, proc_root: str = PROC) -> int:
    """CPUs of the job on this node: SLURM_CPUS_ON_NODE, else the CPUs the step's tasks (and this sampler,
    started in one of them) may run on, else all CPUs of the node."""
    try:
        cpus = int(environ.get("SLURM_CPUS_ON_NODE", ""))
        if cpus > 0:
            return cpus
    except ValueError:
        pass
    allowed: set[int] = set()
    try:
        allowed.update(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        pass
    for pid, stat in StepProcs(step_pid, proc_root).step_processes().items():
        if stat.ppid == step_pid:  # a task of the step
            allowed |= read_allowed_cpus(pid, proc_root)
    return len(allowed) or os.cpu_count() or 1


class Sampler:
    """The records of one node: start, samples, end. It holds the state between samples (the /proc
    reader's memory of exited processes, the sample number)."""

    def __init__(self, *, node: str, interval: float, step_pid: int, cpus: int, gpus: GpuSource,
                 proc_root: str = PROC) -> None:
        self.node = node
        self.interval = interval
        self.cpus = cpus
        self.gpus = gpus
        self.proc_root = proc_root
        self.procs = StepProcs(step_pid, proc_root, skip=os.getpid())
        self.seq = 0
        self._pidfds: dict[tuple[int, int], int] = {}  # a rank's main process -> a pidfd that wakes at its exit
        self._pidfd_open = getattr(os, "pidfd_open", None)  # Linux 5.3 and Python 3.9

    def _head(self, kind: str) -> dict[str, object]:
        return {"v": wire.SCHEMA, "kind": kind, "node": self.node, "seq": self.seq, "t": round(time.time(), 3)}

    def start(self) -> dict[str, object]:
        try:
            names = [dict(gpu) for gpu in self.gpus.names()]
        except Exception:  # noqa: BLE001 - see open_gpus
            names = []
        return {**self._head("start"), "interval": self.interval, "cpus": self.cpus,
                "gpu_source": self.gpus.name, "gpu_note": self.gpus.note, "gpu_names": names,
                "gpu_sampling": str(getattr(self.gpus, "sampling", "") or "")}

    def sample(self, kind: str = "sample", reason: str | None = None, *, gpus: bool = True) -> dict[str, object]:
        """A record of the step's processes now; with `gpus`, of the GPUs too (a record without the key has
        no GPU reading, which is not a reading of 0)."""
        self.seq += 1
        ranks, launcher = self.procs.sample()
        record = {**self._head(kind), "ranks": ranks, "launcher": launcher, "load1": read_load1(self.proc_root)}
        if gpus:
            try:
                record["gpus"] = [dict(gpu) for gpu in self.gpus.read()]
            except Exception:  # noqa: BLE001 - see open_gpus: this sample has no GPU values
                record["gpus"] = []
        if reason is not None:
            record["reason"] = reason
        self._watch_new_ranks()
        return record

    def _watch_new_ranks(self) -> None:
        keys = set(self.procs.rank_mains())
        for key in [key for key in self._pidfds if key not in keys]:
            os.close(self._pidfds.pop(key))
        if self._pidfd_open is None:
            return
        for key in keys - set(self._pidfds):
            try:
                self._pidfds[key] = self._pidfd_open(key[0])
            except OSError:  # gone already (the next sample counts it), or pidfds refused: read every tick
                continue

    def wait_for_rank_exit(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds; True when a rank's main process ended meanwhile (its final CPU seconds
        are read at once, before or just after its reaper takes it: StepProcs.watch)."""
        ended = False
        if self._pidfds:
            poller = select.poll()
            by_fd = {fd: key for key, fd in self._pidfds.items()}
            for fd in by_fd:
                poller.register(fd, select.POLLIN)
            for fd, _events in poller.poll(max(0.0, timeout) * 1000):
                key = by_fd[fd]
                ended = self.procs.watch(key, time.time()) or ended
                # A readable pidfd stays readable: closed whatever the read found, or the next poll would not wait
                os.close(self._pidfds.pop(key))
            unwatched = [key for key in self.procs.rank_mains() if key not in self._pidfds]
        else:
            time.sleep(max(0.0, timeout))
            unwatched = self.procs.rank_mains()
        now = time.time()
        for key in unwatched:  # no pidfd for it: a read every tick keeps its last read at most a tick old
            ended = self.procs.watch(key, now) or ended
        return ended

    def close(self) -> None:
        for fd in self._pidfds.values():
            os.close(fd)
        self._pidfds.clear()


def read_key(fd: int = 0) -> str:
    """The step's key, which the host shim writes on the sampler's stdin (a here-document); the rest of stdin is
    not read. ValueError when there is none: a sampler started by hand, or by a shim without the key."""
    if os.isatty(fd):
        raise ValueError("the step's report key is read on stdin, which is a terminal: envrun's host shim starts "
                         "the sampler with the key there")
    data = b""
    while len(data) <= wire.KEY_LENGTH and b"\n" not in data:
        chunk = os.read(fd, 64)
        if not chunk:
            break
        data += chunk
    key = data.split(b"\n", 1)[0].decode("ascii", "replace").strip()
    if not wire.is_key(key):
        raise ValueError(f"no report key on stdin (expected {wire.KEY_LENGTH} hex digits from envrun's host shim)")
    return key


def emit(record: dict[str, object], key: str, fd: int = 2) -> None:
    """Write the record's lines, each with one os.write (the kernel keeps a write under PIPE_BUF whole)."""
    for line in wire.encode(record, key):
        try:
            written = os.write(fd, line)
        except (BrokenPipeError, OSError) as error:
            raise _StderrGone(str(error)) from error
        if written != len(line):  # only a non-blocking descriptor writes part of a line; the rest would be noise
            raise _StderrGone("short write")


class TaskWatch:
    """Whether the task the sampler watches has ended. The sampler is the child of the task's root (the
    shim, which execs apptainer and the program under the same pid): when that process exits the kernel
    gives the sampler another parent at once, before anyone reaps the root."""

    def __init__(self, task_pid: int, proc_root: str = PROC) -> None:
        self.task_pid = task_pid
        self.proc_root = proc_root
        self.child_of_task = os.getppid() == task_pid

    def ended(self) -> bool:
        if self.child_of_task:
            return os.getppid() != self.task_pid
        stat = read_stat(self.task_pid, self.proc_root)
        return stat is None or stat.state in ("Z", "X")


def _on_signal(signum: int, frame: object) -> None:
    raise _Stop


def run(sampler: Sampler, watch: TaskWatch, key: str, fd: int = 2) -> str:
    """Start, samples every interval and end; the end's reason. Raises _StderrGone when stderr is closed."""
    reason = SIGNAL
    try:
        for signum in _STOP_SIGNALS:
            # A background job of a non-interactive shell ignores SIGINT (POSIX), so that a Ctrl-C meant for
            # the program does not stop it; the sampler keeps that, and ends with the task instead.
            if signal.getsignal(signum) != signal.SIG_IGN:
                signal.signal(signum, _on_signal)
        emit(sampler.start(), key, fd)
        begun = time.monotonic()
        gpus_due = begun + sampler.interval
        scan_due = begun  # at once: the ranks' programs start in the next few tenths of a second
        while True:
            now = time.monotonic()
            if watch.ended():
                reason = TASK_ENDED
                # The other tasks of this node end about now too (their ranks finish together): wait a little
                # for them, so that their totals are final ones and not "running".
                others_due = time.monotonic() + OTHER_TASKS_WAIT_S
                while sampler.procs.running_ranks() and time.monotonic() < others_due:
                    sampler.wait_for_rank_exit(TASK_CHECK_S / 2)
                break
            if now >= scan_due:
                with_gpus = now >= gpus_due
                emit(sampler.sample(gpus=with_gpus), key, fd)
                if with_gpus:
                    gpus_due += sampler.interval
                    if gpus_due <= time.monotonic():  # fell behind (a stopped or starved sampler): never catch up
                        gpus_due = time.monotonic() + sampler.interval
                gap = min(sampler.interval, max(MIN_GAP_S, (time.monotonic() - begun) / DENSE_SHARE))
                scan_due = min(time.monotonic() + gap, gpus_due)
                continue
            if sampler.wait_for_rank_exit(min(TASK_CHECK_S, scan_due - now)):
                scan_due = min(scan_due, time.monotonic() + RANK_END_SAMPLE_S)
    except _Stop:
        pass
    for signum in _STOP_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)  # the end record is written whole, whatever comes now
    emit(sampler.sample("end", reason), key, fd)
    return reason


def parse_args(argv: list[str]) -> tuple[float, int, int]:
    """(interval, task pid, step pid) from `--interval S --task-pid PID --step-pid PID` (also `--name=value`)."""
    values: dict[str, str] = {}
    items = iter(argv)
    for item in items:
        name, equals, value = item.partition("=")
        if name not in ("--interval", "--task-pid", "--step-pid"):
            raise ValueError(f"unknown argument {item!r}")
        values[name] = value if equals else next(items, "")
    missing = [name for name in ("--interval", "--task-pid", "--step-pid") if name not in values]
    if missing:
        raise ValueError(f"missing {', '.join(missing)}")
    interval = float(values["--interval"])
    if not interval > 0:
        raise ValueError(f"--interval must be a positive number of seconds, not {values['--interval']!r}")
    return interval, int(values["--task-pid"]), int(values["--step-pid"])


def main(argv: list[str] | None = None, gpus: GpuSource | None = None, fd: int = 2, key: str | None = None) -> int:
    """The sampler's command; always 0: it never fails the step it watches. `key` None: read from stdin."""
    source = gpus
    try:
        interval, task_pid, step_pid = parse_args(sys.argv[1:] if argv is None else argv)
        if key is None:
            key = read_key(0)
        elif not wire.is_key(key):
            raise ValueError("the report key given is not one")
        watch = TaskWatch(task_pid)
        environ = dict(os.environ)
        source = source or open_gpus(environ)
        sampler = Sampler(node=node_name(environ), interval=interval, step_pid=step_pid,
                          cpus=node_cpus(environ, step_pid), gpus=source)
        try:
            run(sampler, watch, key, fd)
        finally:
            sampler.close()
    except (_StderrGone, _Stop):
        pass
    except BaseException as error:  # noqa: BLE001 - the user's stderr gets one line, never a traceback
        try:
            os.write(fd, f"envrun: report sampler: {type(error).__name__}: {error}\n".encode())
        except OSError:
            pass
    finally:
        if source is not None:
            try:
                source.close()
            except BaseException:  # noqa: BLE001, S110 - closing a GPU reader on the way out must not raise
                pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
