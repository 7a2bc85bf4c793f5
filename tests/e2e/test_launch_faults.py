"""Launch faults on the local Slurm (issue 15): a rank that crashes, a rank that hangs in a collective (ended by
--step-timeout), the image deleted mid-run, and a node that dies in the two-node cluster. In each case envrun ends
within a bound, non-zero, with one line naming the cause, and no process of the job is left on any node.

The job's processes are found by a marker in their environment (srun passes envrun's environment to the tasks,
apptainer to the container, torchrun to the ranks) or the test directory in their command line; zombies are not
counted (they have ended; PID 1 reaps them). Each test records how long the fault took to end the job."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from tests.conftest import REPO, run_cli

pytestmark = [pytest.mark.slow, pytest.mark.apptainer, pytest.mark.slurm]
ENVRUN = str(REPO / "bin/envrun")
CLUSTER = str(REPO / "provision/cluster.sh")
CLEANUP_S = 15  # how long Slurm may take to remove a step's processes after srun has returned

CRASH = """\
import os, time, torch.distributed as dist
dist.init_process_group("gloo")
if dist.get_rank() == 1:
    {fault}
time.sleep(600)
"""
HANG = """\
import time, torch, torch.distributed as dist
dist.init_process_group("gloo")
print(f"STARTED rank {dist.get_rank()}", flush=True)
if dist.get_rank() == 1:
    time.sleep(3600)  # never joins the all_reduce: rank 0 waits in it (gloo's default timeout is 30 min)
dist.all_reduce(torch.ones(1))
"""
STEPS = """\
import socket, sys, time, torch, torch.distributed as dist
dist.init_process_group("gloo")
print(f"STARTED rank {dist.get_rank()} on {socket.gethostname()}", flush=True)
for _ in range(int(sys.argv[1])):
    dist.all_reduce(torch.ones(1))
    time.sleep(0.5)
import email.mime.text  # a module first read after the image file is gone: the mounted image still has it
print(f"DONE rank {dist.get_rank()}", flush=True)
"""


def job_processes(marker: str, directory: Path) -> list[str]:
    """Live processes carrying `marker` in their environment or `directory` in their command line."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/status") as handle:
                if any(line.startswith("State:\tZ") for line in handle):
                    continue
            with open(f"/proc/{entry}/environ", "rb") as handle:
                environ = handle.read()
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                cmdline = handle.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker.encode() in environ or str(directory) in cmdline:
            found.append(f"{entry}: {cmdline[:160]}")
    return found


def assert_no_orphans(marker: str, directory: Path) -> float:
    """Wait up to CLEANUP_S for the job's processes to go; fail naming those left. Returns the seconds waited."""
    started = time.monotonic()
    while True:
        left = job_processes(marker, directory)
        if not left:
            return time.monotonic() - started
        if time.monotonic() - started > CLEANUP_S:
            pytest.fail(f"processes of the job left {CLEANUP_S} s after envrun ended:\n" + "\n".join(left))
        time.sleep(0.5)


def envrun(args: list[str], directory: Path, marker: str, timeout: int) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    result = run_cli([ENVRUN, "--bind", str(directory), *args], env_extra={"ENVRUN_FAULT_TEST": marker},
                     timeout=timeout, cwd=directory)
    return result, time.monotonic() - started


def cause_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.startswith("envrun: the job step failed")]
    assert len(lines) == 1, f"expected one line naming the cause:\n{stderr[-4000:]}"
    # the job report's summary (envbuild.report), when there is one, comes after the cause
    before_report = stderr.split("\nenvrun report: ", 1)[0].split("\nenvrun: report: ", 1)[0]
    assert before_report.rstrip().endswith(lines[0]), "the cause comes after srun's own messages"
    return lines[0]


@pytest.mark.parametrize(("form", "fault", "expected"), [
    ("torchrun", "os._exit(3)", "rank 1 (local rank 1 on {node}) exited with code 3, as torchrun reports; torchrun "
                                "(task 0 on {node}) then exited with code 1; srun then ended the step"),
    ("python", "raise RuntimeError('rank 1 fails on purpose')",
     "rank 1 (task 1 on {node}) exited with code 1; srun then ended the step (--kill-on-bad-exit)"),
])
def test_a_crashing_rank_ends_the_step_and_is_named(reference_image: Path, tmp_path: Path, form: str, fault: str,
                                                    expected: str) -> None:
    (tmp_path / "crash.py").write_text(CRASH.format(fault=fault))
    marker = uuid.uuid4().hex
    result, elapsed = envrun(["--image", str(reference_image), "srun", form, str(tmp_path / "crash.py")],
                             tmp_path, marker, timeout=180)
    assert result.returncode != 0, result.stderr
    assert elapsed < 60, f"the step outlived its crashed rank for {elapsed:.0f} s:\n{result.stderr[-3000:]}"
    node = subprocess.run(["hostname", "-s"], capture_output=True, text=True).stdout.strip()
    assert expected.format(node=node) in cause_line(result.stderr)
    waited = assert_no_orphans(marker, tmp_path)
    print(f"\n{form} crash: envrun ended after {elapsed:.1f} s (exit {result.returncode}), processes gone {waited:.1f} s later")


def test_a_rank_hung_in_a_collective_ends_at_the_step_timeout(reference_image: Path, tmp_path: Path) -> None:
    """--step-timeout 30s becomes srun --time=00:01:00 (Slurm counts minutes); Slurm checks limits about every
    30 s and kills after KillWait (5 s on the test cluster), so the step ends 60 to ~100 s after it started."""
    (tmp_path / "hang.py").write_text(HANG)
    marker = uuid.uuid4().hex
    result, elapsed = envrun(["--image", str(reference_image), "--step-timeout", "30s", "--explain", "srun", "torchrun",
                              str(tmp_path / "hang.py")], tmp_path, marker, timeout=240)
    assert result.returncode != 0
    assert "STARTED rank 1" in result.stdout, result.stderr[-3000:]
    assert "envrun: --time=00:01:00: --step-timeout 30s, rounded up to whole minutes" in result.stderr
    assert 55 < elapsed < 130, f"the hung step ended after {elapsed:.0f} s:\n{result.stderr[-3000:]}"
    assert cause_line(result.stderr).endswith(
        "the step reached its time limit (--step-timeout 30s = srun --time=00:01:00); Slurm stopped every task "
        "(SIGTERM, then SIGKILL after KillWait)")
    waited = assert_no_orphans(marker, tmp_path)
    print(f"\nhang: envrun ended after {elapsed:.1f} s (exit {result.returncode}), processes gone {waited:.1f} s later")


def test_an_image_deleted_mid_run(reference_image: Path, tmp_path: Path) -> None:
    """The ranks already started keep the mounted image and finish; a launch after the deletion is refused
    before srun, so no step starts with an image that is gone."""
    image = tmp_path / "env.sif"
    os.link(reference_image, image) if os.stat(reference_image).st_dev == os.stat(tmp_path).st_dev \
        else subprocess.run(["cp", str(reference_image), str(image)], check=True)
    (tmp_path / "steps.py").write_text(STEPS)
    marker = uuid.uuid4().hex
    out = tmp_path / "first.out"
    with out.open("w") as handle:
        first = subprocess.Popen([ENVRUN, "--image", str(image), "--bind", str(tmp_path), "srun", "torchrun",
                                  str(tmp_path / "steps.py"), "8"], cwd=tmp_path, stdout=handle,
                                 stderr=subprocess.STDOUT, env={**os.environ, "ENVRUN_FAULT_TEST": marker})
        try:
            deadline = time.monotonic() + 120
            while out.read_text().count("STARTED") < 2 and first.poll() is None and time.monotonic() < deadline:
                time.sleep(0.2)
            assert out.read_text().count("STARTED") == 2, out.read_text()[-3000:]
            image.unlink()
            second, elapsed = envrun(["--image", str(image), "srun", "torchrun", str(tmp_path / "steps.py"), "1"],
                                     tmp_path, marker, timeout=60)
            first.wait(timeout=120)
        finally:
            if first.poll() is None:
                first.send_signal(signal.SIGTERM)
                first.wait(timeout=60)
    assert second.returncode == 2 and second.stdout == "", second.stderr
    assert second.stderr.startswith(f"error: image {image} does not exist"), second.stderr
    assert elapsed < 10
    text = out.read_text()
    assert first.returncode == 0, text[-3000:]
    assert "DONE rank 0" in text and "DONE rank 1" in text
    assert_no_orphans(marker, tmp_path)
    print(f"\ndeleted image: the running step finished; the next launch was refused in {elapsed:.2f} s")


def test_a_node_that_dies_ends_the_step(two_nodes: None, reference_image: Path, tmp_path: Path) -> None:
    """node2 dies mid-training: every process in its network namespace (slurmd, slurmstepd, apptainer's starter,
    torchrun, the ranks) gets SIGKILL, as a power loss would end them. node1's ranks fail in their all_reduce at
    once and srun ends node1's side (--kill-on-bad-exit); srun itself returns when slurmctld declares node2 down,
    after SlurmdTimeout (60 s on the test cluster, 300 s by default), and envrun names the node."""
    (tmp_path / "steps.py").write_text(STEPS)
    marker = uuid.uuid4().hex
    out = tmp_path / "run.out"
    try:
        with out.open("w") as handle:
            proc = subprocess.Popen([ENVRUN, "--image", str(reference_image), "--bind", str(tmp_path), "srun", "-N", "2",
                                     "torchrun", str(tmp_path / "steps.py"), "100000"], cwd=tmp_path, stdout=handle,
                                    stderr=subprocess.STDOUT, env={**os.environ, "ENVRUN_FAULT_TEST": marker})
            deadline = time.monotonic() + 180
            while out.read_text().count("STARTED") < 4 and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.5)
            assert out.read_text().count("STARTED") == 4, out.read_text()[-3000:]
            pids = subprocess.run(["ip", "netns", "pids", "envb-node2"], capture_output=True, text=True,
                                  check=True).stdout.split()
            killed = time.monotonic()
            for pid in pids:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except ProcessLookupError:
                    pass
            try:
                proc.wait(timeout=200)
            except subprocess.TimeoutExpired:
                proc.kill()
                pytest.fail(f"envrun still running 200 s after node2 died:\n{out.read_text()[-3000:]}")
            elapsed = time.monotonic() - killed
        text = out.read_text()
        assert proc.returncode != 0, text[-3000:]
        assert elapsed < 150, f"{elapsed:.0f} s"
        assert cause_line(text).endswith("node node2 failed or lost contact (its slurmd or step daemon is gone); srun "
                                         "ended the step on the other nodes")
        waited = assert_no_orphans(marker, tmp_path)
        print(f"\nnode death: envrun ended {elapsed:.1f} s after node2 died (exit {proc.returncode}), "
              f"processes gone {waited:.1f} s later")
    finally:  # node2 back for the other two-node tests (ReturnToService=2 resumes it once its slurmd registers)
        subprocess.run(["bash", CLUSTER, "start", "--nodes", "2"], check=True, capture_output=True, timeout=180)
