"""The job report's per-node sampler: its records from a fake /proc and a fake GPU source, and the real
module run as envrun's host shim runs it (a background child of the task's root, the step's key on its
stdin), read back through wire."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from envbuild.launch.shims import REPORT_KEY_VARIABLE, sampler_start_lines
from envbuild.report import procs, sampler, wire
from tests.report.test_procs import FakeProc

REPO = Path(__file__).resolve().parents[2]
KEY = "5a" * 16


class FakeGpus:
    """A GPU source as envbuild.report.gpus gives one, with fixed values."""

    def __init__(self, *, fail: bool = False) -> None:
        self.name: str | None = "nvidia-smi"
        self.note = ""
        self.fail = fail
        self.closed = False

    def names(self) -> list[dict[str, object]]:
        return [{"index": 0, "name": "Stand-in GPU", "mem_total": 80 << 30}]

    def read(self) -> list[dict[str, object]]:
        if self.fail:
            raise RuntimeError("the GPU tool hung up")
        return [{"index": 0, "util": 0.97, "mem_used": 40 << 30, "mem_total": 80 << 30}]

    def close(self) -> None:
        self.closed = True


def records(data: bytes, key: str = KEY) -> list[dict[str, Any]]:
    """The sampler's records in a stream of stderr, as the step supervisor takes them out: every line with the
    marker carries the key."""
    found = []
    prefix = wire.MARKER_BYTES + key.encode()
    for line in data.split(b"\n"):
        if wire.MARKER_BYTES in line:
            assert line.startswith(prefix), line
            record = wire.decode(line[len(prefix) :].decode())
            assert record is not None, line
            found.append(record)
    return found


def test_arguments() -> None:
    assert sampler.parse_args(["--interval", "2.5", "--task-pid", "10", "--step-pid=9"]) == (2.5, 10, 9)
    for wrong in (["--interval", "2"], ["--interval", "0", "--task-pid", "1", "--step-pid", "1"],
                  ["--interval", "1", "--task-pid", "x", "--step-pid", "1"], ["--what", "1"]):
        with pytest.raises(ValueError):
            sampler.parse_args(wrong)


def test_node_name_and_cpus(tmp_path: Path) -> None:
    assert sampler.node_name({"SLURMD_NODENAME": "gpu-17"}) == "gpu-17"
    assert sampler.node_name({}) == os.uname().nodename
    assert sampler.node_cpus({"SLURM_CPUS_ON_NODE": "56"}, 1) == 56
    fake = FakeProc(tmp_path / "proc")
    fake.add(100, 1, env={})
    fake.add(101, 100, env={}, cpus="0-63")  # a task of the step that may run on more CPUs than this process
    wider = len(set(range(64)) | os.sched_getaffinity(0))
    assert sampler.node_cpus({"SLURM_CPUS_ON_NODE": "?"}, 100, str(fake.root)) == wider
    assert sampler.node_cpus({}, 999, str(fake.root)) == len(os.sched_getaffinity(0))


def test_start_sample_and_end_records(tmp_path: Path) -> None:
    fake = FakeProc(tmp_path / "proc")
    fake.add(100, 1, env={})
    fake.add(101, 100, env={"RANK": "0", "LOCAL_RANK": "0"}, ticks=300)
    node = sampler.Sampler(node="n1", interval=2.0, step_pid=100, cpus=8, gpus=FakeGpus(), proc_root=str(fake.root))
    start = node.start()
    assert start.items() >= {"v": 1, "kind": "start", "node": "n1", "seq": 0, "interval": 2.0, "cpus": 8,
                             "gpu_source": "nvidia-smi", "gpu_note": ""}.items()
    assert start["gpu_names"] == [{"index": 0, "name": "Stand-in GPU", "mem_total": 80 << 30}]
    assert isinstance(start["t"], float) and abs(start["t"] - time.time()) < 5
    one = node.sample()
    assert (one["kind"], one["seq"], one["load1"], "reason" in one) == ("sample", 1, 1.5, False)
    assert [(rank["rank"], rank["pid"]) for rank in one["ranks"]] == [(0, 101)]  # type: ignore[attr-defined]
    assert one["launcher"] == {"procs": 0, "cpu_s": 0.0, "rss": 0}
    assert one["gpus"] == [{"index": 0, "util": 0.97, "mem_used": 40 << 30, "mem_total": 80 << 30}]
    end = node.sample("end", sampler.TASK_ENDED)
    assert (end["kind"], end["seq"], end["reason"]) == ("end", 2, "task-ended")
    for record in (start, one, end):
        assert records(b"".join(wire.encode(record, KEY))) == [record]


def test_a_failing_gpu_source_costs_the_gpu_values_only(tmp_path: Path) -> None:
    node = sampler.Sampler(node="n1", interval=1.0, step_pid=100, cpus=1, gpus=FakeGpus(fail=True),
                           proc_root=str(FakeProc(tmp_path / "proc").root))
    assert node.sample()["gpus"] == []
    none = sampler.NoGpus("no nvidia-smi on this node")
    start = sampler.Sampler(node="n1", interval=1.0, step_pid=100, cpus=1, gpus=none).start()
    assert (start["gpu_source"], start["gpu_note"], start["gpu_names"]) == (None, "no nvidia-smi on this node", [])


def test_without_the_gpu_reader_the_sampler_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "envbuild.report.gpus", None)  # an import of it raises ImportError
    source = sampler.open_gpus({})
    assert source.name is None and source.note.startswith("no GPU reader in this envbuild")
    assert (list(source.names()), list(source.read())) == ([], [])
    source.close()


def test_bad_arguments_give_one_line_and_exit_0() -> None:
    read, write = os.pipe()
    gpus = FakeGpus()
    assert sampler.main(["--interval", "-1", "--task-pid", "1", "--step-pid", "1"], gpus=gpus, fd=write, key=KEY) == 0
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        text = pipe.read().decode()
    assert text.startswith("envrun: report sampler: ") and text.count("\n") == 1, text
    assert gpus.closed


def test_a_closed_stderr_ends_the_sampler_quietly() -> None:
    read, write = os.pipe()
    os.close(read)  # nobody reads: the first write fails with EPIPE (Python ignores SIGPIPE)
    try:
        args = ["--interval", "1", "--task-pid", str(os.getpid()), "--step-pid", str(os.getpid())]
        assert sampler.main(args, gpus=FakeGpus(), fd=write, key=KEY) == 0
    finally:
        os.close(write)


# The task as envrun's host shim makes it: the shim ($$) takes the key out of its environment, starts the
# sampler in the background with the key on its stdin (the shim's own lines) and execs the program (here sleep);
# rank 0 computes, rank 1 sleeps, both for a bounded time and with their own stderr. The test process stands for
# slurmstepd ($PPID), whose descendants are the step's processes.
TASK = "\n".join([*sampler_start_lines('"$PY" -S -m envbuild.report.sampler --interval 0.2'), "echo $!", """
RANK=0 LOCAL_RANK=0 "$PY" -S -c 'import time
end = time.time() + 3
while time.time() < end: pass' 2>/dev/null &
RANK=1 LOCAL_RANK=1 "$PY" -S -c 'import time; time.sleep(3)' 2>/dev/null &
exec sleep "$TASK_S"
"""])


@pytest.fixture
def task() -> Iterator[Any]:
    """Start TASK with the given run time; yields (process, sampler pid); kills what is left afterwards."""
    started: list[subprocess.Popen[bytes]] = []

    def start(task_s: float) -> tuple[subprocess.Popen[bytes], int]:
        env = {**os.environ, "PY": sys.executable, "PYTHONPATH": str(REPO), "TASK_S": str(task_s),
               REPORT_KEY_VARIABLE: KEY}
        env.pop("SLURM_CPUS_ON_NODE", None)
        process = subprocess.Popen(["sh", "-c", TASK], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                                   start_new_session=True)
        started.append(process)
        assert process.stdout is not None
        return process, int(process.stdout.readline())

    yield start
    for process in started:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait()


def gone(pid: int, within_s: float = 1.0) -> bool:
    """Whether the process has ended: no longer in /proc, or a zombie (ended; its new parent, whatever
    adopted it when the task's root ended, reaps it in its own time)."""
    deadline = time.monotonic() + within_s
    while (stat := procs.read_stat(pid)) is not None and stat.state not in ("Z", "X"):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_the_sampler_watches_a_task_and_ends_with_it(task: Any) -> None:
    process, sampler_pid = task(1.5)
    begun = time.monotonic()
    data = process.stderr.read()  # until the sampler, the last writer, has closed it
    ended_after = time.monotonic() - begun
    assert process.wait() == 0
    found = records(data)
    assert data.count(b"\n") == len(found), data  # nothing but records: no traceback, no message
    kinds = [record["kind"] for record in found]
    assert kinds[0] == "start" and kinds[-1] == "end" and kinds.count("sample") >= 2, kinds
    assert [record["seq"] for record in found] == list(range(len(found)))
    start, end = found[0], found[-1]
    assert start["interval"] == 0.2 and start["cpus"] == len(os.sched_getaffinity(0))
    assert end["reason"] == "task-ended"
    # the task ran 1.5 s; the sampler then waits up to OTHER_TASKS_WAIT_S for the ranks still running (they run 3 s)
    assert 1.4 <= ended_after < 1.5 + sampler.OTHER_TASKS_WAIT_S + 1.2, ended_after
    last = next(record for record in reversed(found) if record["kind"] == "sample" and len(record["ranks"]) == 2)
    rank0, rank1 = last["ranks"]
    assert (rank0["rank"], rank0["local_rank"], rank1["rank"], rank1["local_rank"]) == (0, 0, 1, 1)
    assert rank0["procs"] == rank1["procs"] == 1
    assert rank0["cpu_s"] > rank1["cpu_s"], last
    assert last["launcher"]["procs"] == 1  # sleep, the task's root; the sampler does not count itself
    assert gone(sampler_pid)


def test_sigterm_writes_the_end_record(task: Any) -> None:
    process, sampler_pid = task(4)
    line = process.stderr.readline()
    assert records(line)[0]["kind"] == "start"
    os.kill(sampler_pid, signal.SIGTERM)
    found = records(line + _read_until_end(process))
    assert found[-1]["kind"] == "end" and found[-1]["reason"] == "signal", found
    assert gone(sampler_pid)


def _read_until_end(process: subprocess.Popen[bytes]) -> bytes:
    """Lines of stderr up to the end record (the task itself runs on)."""
    assert process.stderr is not None
    data = b""
    while True:
        line = process.stderr.readline()
        data += line
        if not line or b'"kind":"end"' in line:
            return data


def test_a_background_sampler_keeps_ignoring_sigint(task: Any) -> None:
    process, sampler_pid = task(1)
    assert records(process.stderr.readline())[0]["kind"] == "start"
    os.kill(sampler_pid, signal.SIGINT)  # a Ctrl-C meant for the program; the sampler ends with the task instead
    found = records(_read_until_end(process))
    assert found[-1]["reason"] == "task-ended", found
    assert gone(sampler_pid)


def test_the_key_is_read_on_stdin_and_nothing_else_starts_a_sampler() -> None:
    def key_from(data: bytes) -> str:
        read, write = os.pipe()
        os.write(write, data)
        os.close(write)
        try:
            return sampler.read_key(read)
        finally:
            os.close(read)

    assert key_from(KEY.encode() + b"\n") == KEY
    assert key_from(KEY.encode()) == KEY
    for wrong in (b"", b"\n", b"0" * 31 + b"\n", KEY.upper().encode() + b"\n", b"x" * 5000):
        with pytest.raises(ValueError, match="no report key on stdin"):
            key_from(wrong)
    # Run as its own command with nothing on stdin: one line on stderr, no record, exit 0.
    done = subprocess.run([sys.executable, "-S", "-m", "envbuild.report.sampler", "--interval", "1", "--task-pid",
                           str(os.getpid()), "--step-pid", str(os.getpid())], stdin=subprocess.DEVNULL,
                          capture_output=True, env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=30, check=False)
    assert done.returncode == 0 and wire.MARKER_BYTES not in done.stderr, done.stderr
    assert done.stderr.decode().startswith("envrun: report sampler: ValueError: no report key on stdin")


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (stat := procs.read_stat(int(entry))) is not None and stat.ppid == pid:
            found.append(int(entry))
    return found


def test_the_program_never_has_the_key(task: Any) -> None:
    """The shim hands the key to the sampler on its stdin: the program (the task's root after exec, the ranks it
    started) has it neither in its environment nor on its argv, and nor has the sampler (whose environment and
    argv the program could read in /proc)."""
    process, sampler_pid = task(2)
    assert records(process.stderr.readline())[0]["kind"] == "start"  # the sampler has its key, and uses it
    root = process.pid
    deadline = time.monotonic() + 5
    while (stat := procs.read_stat(root)) is not None and stat.comm != "sleep" and time.monotonic() < deadline:
        time.sleep(0.02)  # the shim has exec'd the program
    ranks = [pid for pid in _children(root) if pid != sampler_pid]
    assert len(ranks) == 2 and sampler_pid in _children(root)
    for pid in (root, *ranks, sampler_pid):
        environ = Path(f"/proc/{pid}/environ").read_bytes()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        assert REPORT_KEY_VARIABLE.encode() not in environ and KEY.encode() not in environ, pid
        assert KEY.encode() not in cmdline, pid
    assert b"RANK=1" in Path(f"/proc/{ranks[-1]}/environ").read_bytes() or \
        b"RANK=1" in Path(f"/proc/{ranks[0]}/environ").read_bytes()  # the environments read are the ranks'
