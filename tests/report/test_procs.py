"""The /proc reader of the job report's sampler: fake /proc trees in tmp_path, in the shapes proc(5)
documents, and the real /proc with real child processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from envbuild.report import procs
from envbuild.report.procs import StepProcs, descendants, parse_cpu_list, parse_environ, parse_stat

TICKS = procs.CLOCK_TICKS


def stat_line(pid: int, comm: str, ppid: int, *, ticks: int = 0, threads: int = 1, start: int = 1000,
              rss_pages: int = 10, state: str = "S", reaped: int = 0) -> str:
    """A /proc/PID/stat line (proc(5)): 52 fields, utime and stime at 14 and 15, cutime and cstime (what the
    children it waited for used) at 16 and 17, num_threads at 20, starttime at 22, rss (pages) at 24."""
    fields = [state, str(ppid), str(pid), str(pid), "0", "-1", "4194304", "100", "0", "0", "0",
              str(ticks), "0", str(reaped), "0", "20", "0", str(threads), "0", str(start), "123456789",
              str(rss_pages)]
    fields += ["0"] * (52 - 2 - len(fields))
    return f"{pid} ({comm}) {' '.join(fields)}\n"


class FakeProc:
    """A /proc tree in a folder: stat, environ and status of each process, and loadavg."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(exist_ok=True)
        (root / "loadavg").write_text("1.50 0.80 0.40 2/345 6789\n")
        (root / "uptime").write_text("100.00 150.00\n")
        (root / "self").mkdir(exist_ok=True)  # not a pid: skipped

    def add(self, pid: int, ppid: int, *, env: dict[str, str] | None = None, comm: str = "python", ticks: int = 0,
            threads: int = 1, start: int = 1000, rss_pages: int = 10, cpus: str = "0-3", state: str = "S",
            reaped: int = 0) -> None:
        folder = self.root / str(pid)
        folder.mkdir(exist_ok=True)
        (folder / "stat").write_text(stat_line(pid, comm, ppid, ticks=ticks, threads=threads, start=start,
                                               rss_pages=rss_pages, state=state, reaped=reaped))
        environ = folder / "environ"
        if env is None:  # unreadable: another user's process
            environ.unlink(missing_ok=True)
        else:
            environ.write_bytes(b"".join(f"{key}={value}".encode() + b"\0" for key, value in env.items()))
        status = f"Name:\t{comm}\nState:\tS (sleeping)\nCpus_allowed:\tf\nCpus_allowed_list:\t{cpus}\n"
        (folder / "status").write_text(status)

    def remove(self, pid: int) -> None:
        folder = self.root / str(pid)
        for child in folder.iterdir():
            child.unlink()
        folder.rmdir()


def by_rank(ranks: list[dict[str, object]]) -> dict[Any, dict[str, Any]]:
    return {entry["rank"]: entry for entry in ranks}


def test_stat_fields_after_a_command_name_with_spaces_and_parentheses() -> None:
    stat = parse_stat(stat_line(42, "my (weird) name) x", 7, ticks=250, threads=5, start=99, rss_pages=3))
    assert stat is not None
    assert (stat.comm, stat.ppid, stat.threads, stat.start) == ("my (weird) name) x", 7, 5, 99)
    assert stat.cpu_s == pytest.approx(250 / TICKS)
    assert stat.rss == 3 * procs.PAGE_SIZE
    assert parse_stat("garbage") is None
    assert parse_stat("1 (x) S 0") is None  # cut short


def test_cpu_lists_and_environments() -> None:
    assert parse_cpu_list("0-3,8,10-11\n") == {0, 1, 2, 3, 8, 10, 11}
    assert parse_cpu_list("5") == {5}
    assert parse_cpu_list("") == set()
    assert parse_cpu_list("x-y") == set()
    assert parse_environ(b"PATH=/bin\0RANK=3\0LOCAL_RANK=1\0XRANK=9\0", ("RANK", "LOCAL_RANK")) == {
        "RANK": "3", "LOCAL_RANK": "1"}


def test_descendants_skip_a_process_and_its_children() -> None:
    parents = {10: 1, 11: 10, 12: 11, 13: 10, 14: 13, 20: 1}
    assert sorted(descendants(10, parents)) == [11, 12, 13, 14]
    assert sorted(descendants(10, parents, skip=13)) == [11, 12]
    found = descendants(10, parents)
    assert found.index(11) < found.index(12) and found.index(13) < found.index(14)  # parents first


def test_ranks_launcher_and_unrelated_processes(tmp_path: Path) -> None:
    fake = FakeProc(tmp_path / "proc")
    fake.add(100, 1, env={}, comm="slurmstepd")  # the step: not counted
    fake.add(101, 100, env={"PATH": "/bin"}, comm="torchrun", ticks=100)
    fake.add(102, 101, env={"RANK": "0", "LOCAL_RANK": "0"}, ticks=500, threads=8, rss_pages=100, cpus="0-6")
    fake.add(103, 102, env={"RANK": "0", "LOCAL_RANK": "0"}, comm="pt_data_worker", ticks=50, rss_pages=20)
    fake.add(104, 101, env={"RANK": "1", "LOCAL_RANK": "1"}, ticks=30, threads=4, cpus="7-13")
    fake.add(105, 104, env={}, comm="helper", ticks=5)  # started with a clean environment: still rank 1's
    fake.add(106, 100, env=None, comm="apptainer", ticks=7)  # environment unreadable: launcher
    fake.add(200, 1, env={"RANK": "5"}, ticks=999)  # another job's rank
    ranks, launcher = StepProcs(100, str(fake.root)).sample()
    assert [entry["rank"] for entry in ranks] == [0, 1]
    rank0, rank1 = ranks
    started = rank0.pop("started")
    assert rank0 == {"rank": 0, "local_rank": 0, "pid": 102, "cores": 7, "procs": 2, "threads": 9,
                     "cpu_s": round(550 / TICKS, 2), "rss": 120 * procs.PAGE_SIZE, "hwm": 0, "ended": None,
                     "cpu_source": "running", "cgroup_cpu_s": None, "cgroup_peak": None}
    # seen at the first scan already running: it started after the sampler did (its fork, at uptime less
    # starttime, came in the container's start-up), so no earlier than the StepProcs was made
    assert time.time() - 5 < started <= time.time() + 0.0005  # the record rounds to the millisecond
    assert (rank1["pid"], rank1["procs"], rank1["threads"], rank1["cores"]) == (104, 2, 5, 7)
    assert rank1["cpu_s"] == round(35 / TICKS, 2)
    assert launcher == {"procs": 2, "cpu_s": round(107 / TICKS, 2), "rss": 20 * procs.PAGE_SIZE}


def test_the_main_process_is_the_highest_ancestor_with_the_same_rank(tmp_path: Path) -> None:
    fake = FakeProc(tmp_path / "proc")
    fake.add(100, 1, env={})
    fake.add(101, 100, env={"RANK": "3", "LOCAL_RANK": "1"}, comm="shim")  # envrun's shim sets RANK for srun tasks
    fake.add(102, 101, env={"RANK": "3", "LOCAL_RANK": "1"}, comm="python")
    ranks, launcher = StepProcs(100, str(fake.root)).sample()
    assert [(entry["rank"], entry["pid"], entry["local_rank"], entry["procs"]) for entry in ranks] == [(3, 101, 1, 2)]
    assert launcher["procs"] == 0


def test_cpu_time_of_exited_processes_stays_with_their_rank(tmp_path: Path) -> None:
    fake = FakeProc(tmp_path / "proc")
    fake.add(100, 1, env={})
    fake.add(102, 100, env={"RANK": "0"}, ticks=100)
    fake.add(103, 102, env={"RANK": "0"}, ticks=40, start=2000)  # a DataLoader worker
    fake.add(104, 100, env={"RANK": "1"}, ticks=10)
    step = StepProcs(100, str(fake.root))
    assert by_rank(step.sample()[0])[0]["cpu_s"] == round(140 / TICKS, 2)
    fake.add(103, 102, env={"RANK": "0"}, ticks=60, start=2000)
    assert by_rank(step.sample()[0])[0]["cpu_s"] == round(160 / TICKS, 2)
    fake.remove(103)  # the worker exits (end of epoch) after 70 ticks: its parent's cutime gets all of them
    fake.add(102, 100, env={"RANK": "0"}, ticks=110, reaped=70)
    rank0 = by_rank(step.sample()[0])[0]
    assert (rank0["cpu_s"], rank0["procs"]) == (round(180 / TICKS, 2), 1)  # the 10 ticks after its last read too
    fake.add(103, 102, env={"RANK": "0"}, ticks=5, start=3000)  # a new worker that got the same pid
    assert by_rank(step.sample()[0])[0]["cpu_s"] == round(185 / TICKS, 2)
    fake.remove(104)  # rank 1 ended, reaped by slurmstepd (not in the step): still reported, with its last read
    rank1 = by_rank(step.sample()[0])[1]
    assert (rank1["procs"], rank1["threads"], rank1["rss"], rank1["cpu_s"], rank1["pid"]) == (
        0, 0, 0, round(10 / TICKS, 2), 104)
    assert rank1["cpu_source"] == "last-read" and rank1["ended"] is not None


def test_a_rank_that_ends_is_counted_to_its_last_tick(tmp_path: Path) -> None:
    """A rank's final CPU seconds come from the kernel: its own stat as a zombie, else the growth of its
    reaper's cutime; what the reaper (the launcher) received is not counted for the launcher again."""
    fake = FakeProc(tmp_path / "proc")
    fake.add(100, 1, env={})
    fake.add(101, 100, env={}, comm="torchrun", ticks=20)
    fake.add(102, 101, env={"RANK": "0"}, ticks=100, start=1100)
    fake.add(103, 101, env={"RANK": "1"}, ticks=50, start=1100)
    step = StepProcs(100, str(fake.root))
    step.sample()
    fake.add(102, 101, env={"RANK": "0"}, ticks=180, start=1100, state="Z")  # exited, not yet reaped
    assert step.watch((102, 1100), time.time()) is True
    fake.remove(102)  # torchrun reaps it
    fake.add(101, 100, env={}, comm="torchrun", ticks=22, reaped=180)
    ranks, launcher = step.sample()
    rank0 = by_rank(ranks)[0]
    assert (rank0["cpu_s"], rank0["cpu_source"]) == (round(180 / TICKS, 2), "exit")
    assert launcher["cpu_s"] == round(22 / TICKS, 2)  # its cutime holds rank 0's time: counted once, for rank 0
    fake.remove(103)  # reaped before anyone read it as a zombie: torchrun's cutime grew by its final 90 ticks
    fake.add(101, 100, env={}, comm="torchrun", ticks=23, reaped=270)
    ranks, launcher = step.sample()
    rank1 = by_rank(ranks)[1]
    assert (rank1["cpu_s"], rank1["cpu_source"]) == (round(90 / TICKS, 2), "exit")
    assert launcher["cpu_s"] == round(23 / TICKS, 2)
    assert rank1["ended"] is not None and rank1["started"] is not None


def test_a_rank_whose_exec_is_seen_starts_there(tmp_path: Path) -> None:
    """The rank's program starts at its exec (RANK appears), not at the fork of the container process."""
    fake = FakeProc(tmp_path / "proc")
    fake.add(100, 1, env={})
    fake.add(101, 100, env={}, comm="starter", ticks=5)
    fake.add(102, 101, env={}, comm="sh", ticks=3, start=500)
    step = StepProcs(100, str(fake.root))
    step.sample(now=1000.0)
    fake.add(102, 101, env={"RANK": "0"}, comm="python", ticks=53, start=500)
    ranks, launcher = step.sample(now=1001.0)
    assert ranks[0]["started"] == 1000.0 and ranks[0]["cpu_s"] == round(50 / TICKS, 2)
    assert launcher["cpu_s"] == round(8 / TICKS, 2)


def test_a_process_that_execs_into_a_rank_keeps_its_launcher_time(tmp_path: Path) -> None:
    fake = FakeProc(tmp_path / "proc")
    fake.add(100, 1, env={})
    fake.add(101, 100, env={}, comm="shim", ticks=20)
    step = StepProcs(100, str(fake.root))
    assert step.sample()[1]["cpu_s"] == round(20 / TICKS, 2)
    fake.add(101, 100, env={"RANK": "0"}, comm="python", ticks=50)  # exec: new image, new environment
    ranks, launcher = step.sample()
    assert launcher == {"procs": 0, "cpu_s": round(20 / TICKS, 2), "rss": 0}
    assert ranks[0]["cpu_s"] == round(30 / TICKS, 2)


def test_processes_outside_the_step_are_read_again_only_in_a_full_scan(tmp_path: Path) -> None:
    fake = FakeProc(tmp_path / "proc")
    fake.add(100, 1, env={})
    fake.add(300, 1, env={"RANK": "9"}, start=10)  # another job's process
    step = StepProcs(100, str(fake.root))
    assert step.sample()[0] == []
    fake.add(101, 100, env={"RANK": "0"}, start=20)  # a new process of the step: found at once
    assert [entry["rank"] for entry in step.sample()[0]] == [0]
    fake.remove(300)
    fake.add(300, 100, env={"RANK": "1"}, start=30)  # its pid handed out again, to a process of the step
    found = [len(step.sample()[0]) for _ in range(procs.FULL_SCAN_EVERY)]
    assert found[0] == 1 and found[-1] == 2, found  # found by the next full scan


def test_node_load_and_missing_files(tmp_path: Path) -> None:
    fake = FakeProc(tmp_path / "proc")
    assert procs.read_load1(str(fake.root)) == 1.5
    assert procs.read_load1(str(tmp_path / "nowhere")) is None
    assert procs.read_rank(12345, str(fake.root)) == (None, None)
    assert procs.read_allowed_cpus(12345, str(fake.root)) == set()
    assert procs.list_pids(str(tmp_path / "nowhere")) == []
    assert StepProcs(100, str(tmp_path / "nowhere")).sample() == ([], {"procs": 0, "cpu_s": 0.0, "rss": 0})


# A step of real processes: a parent (the stand-in for slurmstepd) starts rank 0 busy, rank 1 asleep and rank 2
# with a child of its own, each for a few seconds at most (the test kills them when done), and waits for them.
STEP = """
import os, subprocess, sys
code = {
    "0": "import time\\nend = time.time() + 60\\nwhile time.time() < end: pass",
    "1": "import time; time.sleep(60)",
    "2": "import subprocess, sys; subprocess.run([sys.executable, '-c', 'import time; time.sleep(60)'])",
}
children = [subprocess.Popen([sys.executable, "-S", "-c", text], env={**os.environ, "RANK": rank, "LOCAL_RANK": rank})
            for rank, text in code.items()]
for child in children:
    child.wait()
"""


def test_real_processes_are_grouped_and_the_busy_rank_uses_cpu() -> None:
    step = subprocess.Popen([sys.executable, "-S", "-c", STEP], start_new_session=True)
    try:
        sampler = StepProcs(step.pid)
        # Generous deadlines, left as soon as the condition holds: in CI this runs beside the container and cluster
        # tests on 2 cores, where starting the step's processes took over 4 s once.
        deadline = time.monotonic() + 30
        while True:
            ranks = by_rank(sampler.sample()[0])
            if (len(ranks) == 3 and ranks[2]["procs"] == 2) or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert sorted(ranks) == [0, 1, 2]
        assert [ranks[rank]["procs"] for rank in (0, 1, 2)] == [1, 1, 2]
        assert all(ranks[rank]["local_rank"] == rank for rank in (0, 1, 2))
        assert all(isinstance(ranks[rank]["rss"], int) and ranks[rank]["rss"] > 0 for rank in (0, 1, 2))
        assert ranks[0]["cores"] == len(os.sched_getaffinity(0))
        deadline = time.monotonic() + 30
        while True:
            time.sleep(0.2)
            later = by_rank(sampler.sample()[0])
            busy = later[0]["cpu_s"] - ranks[0]["cpu_s"]
            idle = later[1]["cpu_s"] - ranks[1]["cpu_s"]
            if busy >= 0.1 or time.monotonic() > deadline:
                break
        assert busy >= 0.1, (ranks, later)
        assert idle < busy / 2, (ranks, later)
    finally:
        os.killpg(step.pid, signal.SIGKILL)
        step.wait()


def add_cgroup(fake: FakeProc, pid: int, text: str) -> None:
    (fake.root / str(pid) / "cgroup").write_text(text)


def test_a_slurm_task_cgroup_of_its_own_gives_the_ranks_kernel_totals(tmp_path: Path) -> None:
    """Slurm's task/cgroup (cgroup/v2): each srun task, one rank, has .../job_X/step_Y/user/task_N with cpu.stat
    and memory.peak; under torchrun the ranks share one task's cgroup, which says nothing of one rank."""
    fake = FakeProc(tmp_path / "proc")
    cgroups = tmp_path / "cgroup"
    fake.add(100, 1, env={})
    fake.add(102, 100, env={"RANK": "0"}, ticks=100)
    fake.add(103, 100, env={"RANK": "1"}, ticks=10)
    for pid, task, usec, peak in ((102, 0, 1_250_000, 300 << 20), (103, 1, 120_000, 200 << 20)):
        path = f"/system.slice/slurmstepd.scope/job_7/step_0/user/task_{task}"
        add_cgroup(fake, pid, f"0::{path}\n")
        (cgroups / path.lstrip("/")).mkdir(parents=True)
        (cgroups / path.lstrip("/") / "cpu.stat").write_text(f"usage_usec {usec}\nuser_usec 1\nsystem_usec 1\n")
        (cgroups / path.lstrip("/") / "memory.peak").write_text(f"{peak}\n")
    step = StepProcs(100, str(fake.root))
    step.cgroup_root = str(cgroups)
    ranks = by_rank(step.sample()[0])
    assert (ranks[0]["cgroup_cpu_s"], ranks[0]["cgroup_peak"]) == (1.25, 300 << 20)
    assert (ranks[1]["cgroup_cpu_s"], ranks[1]["cgroup_peak"]) == (0.12, 200 << 20)
    add_cgroup(fake, 103, "0::/system.slice/slurmstepd.scope/job_7/step_0/user/task_0\n")  # shared: not a rank's
    step = StepProcs(100, str(fake.root))
    step.cgroup_root = str(cgroups)
    assert [r["cgroup_cpu_s"] for r in step.sample()[0]] == [None, None]


def test_cgroup_v1_and_no_slurm_cgroup(tmp_path: Path) -> None:
    fake = FakeProc(tmp_path / "proc")
    fake.add(100, 1, env={})
    fake.add(102, 100, env={"RANK": "0"}, ticks=100)
    path = "/slurm/uid_1000/job_7/step_0/task_0"
    add_cgroup(fake, 102, f"4:memory:{path}\n3:cpu,cpuacct:{path}\n1:name=systemd:/\n")
    assert procs.task_cgroup(102, str(fake.root), "/cg") == (f"/cg/cpu,cpuacct{path}", f"/cg/memory{path}")
    add_cgroup(fake, 102, "0::/user.slice/user-1000.slice/session-3.scope\n")  # proctrack/linuxproc: none
    assert procs.task_cgroup(102, str(fake.root), "/cg") is None
