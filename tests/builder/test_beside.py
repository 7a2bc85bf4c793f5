"""Commands beside a step (the spec's tests beside the squash), with the real executor and plain shell commands:
the step completes only when they pass, a failing one stops the step's tool at once and is the error reported
(with its output), and a step that fails on its own stops them."""

from __future__ import annotations

import io
import os
import time
from pathlib import Path

import pytest

from envbuild.builder.execute.executor import BuildExecutor, StepFailed
from envbuild.builder.plan.actions import JoinBeside, Run, StartBeside, Step, WriteFile
from envbuild.shared.errors import ToolError


def execute(tmp_path: Path, actions: tuple) -> BuildExecutor:
    executor = BuildExecutor(tmp_path / "build.log", store_root=tmp_path / "store", out=io.StringIO())
    executor.execute_steps((Step("squash", "squash", actions, cleanup=()),), None, "test")
    return executor


def sh(script: str) -> Run:
    return Run(("/bin/sh", "-c", script))


def test_the_step_completes_after_the_commands_beside_it_passed(tmp_path: Path) -> None:
    done = tmp_path / "complete"
    marks = tmp_path / "marks"
    execute(tmp_path, (
        StartBeside("test", "two tests", (sh(f"sleep 0.3; echo first >> {marks}"), sh(f"echo second >> {marks}; echo tested"))),
        sh("sleep 0.1"),  # the squash, shorter than the tests: the join waits for them
        JoinBeside("test"),
        WriteFile(str(done), "yes\n"),
    ))
    assert marks.read_text() == "second\nfirst\n"  # side by side: the short one ended first
    assert done.exists()
    log = (tmp_path / "build.log").read_text()
    assert "--- beside: test" in log and "tested" in log
    # The log keeps each command's output together, in the spec's order.
    assert log.index("sleep 0.3") < log.index("echo second") < log.index("tested")


def test_the_commands_run_side_by_side_up_to_the_width(tmp_path: Path) -> None:
    started = time.monotonic()
    execute(tmp_path, (StartBeside("test", "two slow tests", (sh("sleep 1"), sh("sleep 1"))), JoinBeside("test")))
    assert time.monotonic() - started < 1.8  # not 2 s one after the other
    from envbuild.builder.execute.beside import Beside

    marks = tmp_path / "one-at-a-time"
    beside = Beside("test", (sh(f"echo a >> {marks}; sleep 0.3; echo a >> {marks}"), sh(f"echo b >> {marks}")),
                    dict(os.environ), parallel=1).start()
    beside.join(io.StringIO())
    assert marks.read_text() == "a\na\nb\n"


def test_a_failing_command_stops_the_step_at_once_with_its_output(tmp_path: Path) -> None:
    done = tmp_path / "complete"
    started = time.monotonic()
    with pytest.raises(ToolError) as failed:  # as a failed tool's: `error: step 'test' failed: ...`
        execute(tmp_path, (
            StartBeside("test", "a failing test", (sh("echo 'assertion: gloo backend missing'; exit 3"),)),
            sh("sleep 30"),  # the squash: stopped as soon as the test failed
            JoinBeside("test"),
            WriteFile(str(done), "yes\n"),
        ))
    assert time.monotonic() - started < 10
    message = str(failed.value)
    assert "step 'test' failed: sh exited with status 3" in message
    assert "gloo backend missing" in message
    assert not done.exists()


def test_a_failing_command_stops_the_other_commands_beside_it(tmp_path: Path) -> None:
    pid_file = tmp_path / "long.pid"
    started = time.monotonic()
    with pytest.raises(ToolError) as failed:
        execute(tmp_path, (
            StartBeside("test", "two tests", (sh(f"echo $$ > {pid_file}; exec sleep 60"),
                                               sh(f"while [ ! -s {pid_file} ]; do sleep 0.05; done; echo broken; exit 5"))),
            JoinBeside("test"),
        ))
    assert time.monotonic() - started < 20
    assert "exited with status 5" in str(failed.value) and "broken" in str(failed.value)
    with pytest.raises(ProcessLookupError):
        os.kill(int(pid_file.read_text()), 0)


def test_a_failing_step_stops_the_commands_beside_it(tmp_path: Path) -> None:
    pid_file = tmp_path / "test.pid"
    started = time.monotonic()
    with pytest.raises(StepFailed) as failed:
        execute(tmp_path, (
            StartBeside("test", "a long test", (sh(f"echo $$ > {pid_file}; exec sleep 60"),)),
            sh(f"while [ ! -s {pid_file} ]; do sleep 0.05; done; exit 4"),  # the squash fails
            JoinBeside("test"),
        ))
    assert "exited with status 4" in str(failed.value)  # the step's own failure is the one reported
    assert time.monotonic() - started < 20
    pid = int(pid_file.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # the test was stopped, not left running
