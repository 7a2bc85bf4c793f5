"""envrun under srun stays srun's parent (envbuild.launch.supervise): srun's output passes through unchanged, its
exit status is envrun's, signals reach it, and a failed step gets one line naming the cause. A fake srun (a shell
script first on PATH) stands in for Slurm; the real one is in tests/e2e/test_launch_faults.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO

ENVRUN = str(REPO / "bin" / "envrun")


@pytest.fixture
def fake_bin(tmp_path: Path) -> Path:
    """A directory for the fake srun, with an apptainer that only answers --version (envrun checks it)."""
    directory = tmp_path / "bin"
    directory.mkdir()
    write_script(directory / "apptainer", 'echo "apptainer version 1.4.5"\n')
    return directory


def write_script(path: Path, body: str) -> None:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)


def environment(tmp_path: Path, fake_bin: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "ENVRUN_", "ENVBUILD_"))}
    env.update(PATH=f"{fake_bin}:/usr/bin:/bin", HOME=str(tmp_path / "home"), ENVBUILD_SYSTEM="local",
               ENVBUILD_CACHE_DIR=str(tmp_path / "cache"), XDG_CONFIG_HOME=str(tmp_path / "config"),
               ENVRUN_REPORT="off")  # a fake srun runs no sampler; the report's own tests: tests/report
    return env


_STARTED: list[subprocess.Popen[bytes]] = []


@pytest.fixture(autouse=True)
def _nothing_left_running() -> Iterator[None]:
    """What a test started (envrun, the fake srun and its children) ends with the test, passed or failed: a
    leftover would be counted by the next tests that look at this process's descendants (tests/report)."""
    yield
    while _STARTED:
        proc = _STARTED.pop()
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


def _as_from_a_shell() -> None:
    """SIGINT and SIGQUIT at their defaults in envrun, whatever this test process inherited: a background job of a
    non-interactive shell (`pytest &`) starts with them ignored, and envrun keeps an ignored signal ignored."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGQUIT, signal.SIG_DFL)


def start(tmp_path: Path, fake_bin: Path, *command: str) -> subprocess.Popen[bytes]:
    image = tmp_path / "env.sif"
    image.write_bytes(b"never opened: srun is a fake\n")
    proc = subprocess.Popen([ENVRUN, "--image", str(image), "srun", *command], cwd=tmp_path,
                            env=environment(tmp_path, fake_bin), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True, preexec_fn=_as_from_a_shell)
    _STARTED.append(proc)
    return proc


def test_output_and_exit_status_pass_through_and_the_cause_comes_last(tmp_path: Path, fake_bin: Path) -> None:
    write_script(fake_bin / "srun", 'echo "out 1"\necho "err 1" >&2\necho "out 2"\n'
                 'printf "srun: error: vm: task 1: Exited with exit code 3\\nno newline at the end" >&2\nexit 7\n')
    proc = start(tmp_path, fake_bin, "python", "train.py")
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 7
    assert out.decode() == "out 1\nout 2\n"
    lines = err.decode().splitlines()
    assert lines[:3] == ["err 1", "srun: error: vm: task 1: Exited with exit code 3", "no newline at the end"]
    assert lines[3:] == ["envrun: the job step failed (srun exit status 7): rank 1 (task 1 on vm) exited with code 3"]


def test_a_step_that_succeeds_gets_no_line(tmp_path: Path, fake_bin: Path) -> None:
    write_script(fake_bin / "srun", 'echo "srun: warning: something harmless" >&2\nexit 0\n')
    proc = start(tmp_path, fake_bin, "torchrun", "train.py")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0 and err.decode() == "srun: warning: something harmless\n"


def test_an_srun_ended_by_a_signal(tmp_path: Path, fake_bin: Path) -> None:
    write_script(fake_bin / "srun", "kill -KILL $$\n")
    proc = start(tmp_path, fake_bin, "torchrun", "train.py")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + 9
    assert err.decode().endswith("envrun: the job step failed (srun ended by SIGKILL): srun itself was stopped by a "
                                 "signal (envrun's, scancel's or the terminal's)\n")


@pytest.mark.parametrize("name", ["SIGTERM", "SIGINT", "SIGUSR1"])
def test_signals_to_envrun_reach_srun(tmp_path: Path, fake_bin: Path, name: str) -> None:
    """SIGINT too: envrun is not in a terminal's foreground here, so srun would not get it otherwise."""
    ready, got = tmp_path / "ready", tmp_path / "got"
    write_script(fake_bin / "srun", f"trap 'echo {name} > {got}; exit 143' {name.removeprefix('SIG')}\n"
                 f"touch {ready}\nwhile :; do sleep 0.1; done\n")
    proc = start(tmp_path, fake_bin, "python", "train.py")
    deadline = time.monotonic() + 30
    while not ready.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(getattr(signal, name))
    _, err = proc.communicate(timeout=30)
    assert got.read_text().strip() == name, err.decode()
    assert proc.returncode == 143


def test_a_process_left_holding_srun_stderr_does_not_keep_envrun(tmp_path: Path, fake_bin: Path) -> None:
    holder = tmp_path / "holder.pid"
    write_script(fake_bin / "srun", f"sleep 60 >&2 &\necho $! > {holder}\n"
                 "echo 'srun: error: vm: task 0: Killed' >&2\nexit 137\n")
    started = time.monotonic()
    proc = start(tmp_path, fake_bin, "python", "train.py")
    try:
        _, err = proc.communicate(timeout=60)
    finally:
        os.kill(int(holder.read_text()), signal.SIGKILL)
    assert proc.returncode == 137 and time.monotonic() - started < 15
    assert "rank 0 (task 0 on vm) was killed by SIGKILL (Killed)" in err.decode()


def test_much_output_arrives_whole_and_in_order(tmp_path: Path, fake_bin: Path) -> None:
    lines = 200_000
    write_script(fake_bin / "srun", f'{sys.executable} -c "import sys\n'
                 f'for i in range({lines}): sys.stderr.write(f\'line {{i}} \' + 40 * \'x\' + chr(10))"\n')
    proc = start(tmp_path, fake_bin, "python", "train.py")
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0
    assert err.decode().splitlines() == [f"line {i} " + 40 * "x" for i in range(lines)]


def test_a_missing_srun_is_named(tmp_path: Path, fake_bin: Path) -> None:
    for tool in ("bash", "readlink"):  # bin/envrun's own needs; no srun on this PATH
        (fake_bin / tool).symlink_to(subprocess.run(["sh", "-c", f"command -v {tool}"], capture_output=True,
                                                    text=True, check=True).stdout.strip())
    image = tmp_path / "env.sif"
    image.write_bytes(b"never opened\n")
    result = subprocess.run([ENVRUN, "--image", str(image), "srun", "python", "train.py"], cwd=tmp_path,
                            env={**environment(tmp_path, fake_bin), "PATH": str(fake_bin)},
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "srun is not on PATH" in result.stderr, result.stderr


def test_with_a_report_both_streams_pass_through_and_the_records_leave_stderr(tmp_path: Path, fake_bin: Path) -> None:
    """The fake srun plays a node's sampler too: its records (framed lines, envbuild.report.wire) leave stderr, the
    rest of both streams arrives byte for byte, the metric line printed on stdout reaches the report, and the
    summary comes after the cause line of the failed step."""
    from envbuild.report.wire import SCHEMA, encode

    start_record = {"v": SCHEMA, "kind": "start", "node": "vm", "seq": 0, "t": 1.0, "interval": 1.0, "cpus": 2,
                    "gpu_source": None, "gpu_note": "no GPU tool here", "gpu_names": []}
    placeholder = "0" * 32  # the fake srun frames the record with the key envrun put in its environment
    records = tmp_path / "records"
    records.write_bytes(b"".join(encode(start_record, placeholder)))
    write_script(fake_bin / "srun", f'printf "out 1\\nenvrun-metric: samples_per_s=42.5\\nno newline"\n'
                 f'printf "\\r 50%%|##" >&2\nsed "s/{placeholder}/$ENVRUN_REPORT_KEY/" {records} >&2\n'
                 f'printf "\\r100%%|####\\n" >&2\n'
                 'echo "srun: error: vm: task 0: Exited with exit code 2" >&2\nexit 2\n')
    env = environment(tmp_path, fake_bin)
    env["ENVRUN_REPORT"] = str(tmp_path / "report")
    image = tmp_path / "env.sif"
    image.write_bytes(b"never opened: srun is a fake\n")
    proc = subprocess.run([ENVRUN, "--image", str(image), "srun", "python", "train.py"], cwd=tmp_path, env=env,
                          capture_output=True, timeout=60, check=False)
    assert proc.returncode == 2
    assert proc.stdout == b"out 1\nenvrun-metric: samples_per_s=42.5\nno newline"
    err = proc.stderr.decode()
    assert err.startswith("\r 50%|##\r100%|####\nsrun: error: vm: task 0: Exited with exit code 2\nenvrun: the job step "
                          "failed (srun exit status 2): rank 0 (task 0 on vm) exited with code 2\nenvrun report: ")
    assert "\x1e" not in err and err.endswith(f"report: {tmp_path / 'report'}\n")
    assert '"samples_per_s": 42.5' in (tmp_path / "report" / "report.json").read_text()
