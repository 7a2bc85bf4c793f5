"""Stand-ins for Slurm's commands as envbuild.slurm.cluster.ask_at_once starts them (subprocess.Popen's
communicate, kill and returncode): each answers after a delay, hangs until killed, or is missing, so that the
tests can time how the queries are waited for without a Slurm controller."""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

SCONTROL_FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "scontrol"
HANG = float("inf")


@dataclass
class Reply:
    """What one command does: after `delay_s` (HANG: never, until killed) it exits with `returncode`, printing
    `stdout` and `stderr`; `missing`: it is not on PATH."""

    stdout: str = ""
    stderr: str = ""
    returncode: int = 0
    delay_s: float = 0.0
    missing: bool = False


@dataclass
class FakeProcess:
    argv: list[str]
    reply: Reply
    input: str | None = None
    returncode: int | None = None
    killed: threading.Event = field(default_factory=threading.Event)

    def communicate(self, input: str | None = None, timeout: float | None = None) -> tuple[str, str]:
        if input is not None:
            self.input = input
        if self.killed.is_set():
            return "", ""
        limit = self.reply.delay_s if timeout is None else min(self.reply.delay_s, timeout)
        if self.killed.wait(None if limit == HANG else limit):
            self.returncode = -9
            return "", ""
        if timeout is not None and timeout < self.reply.delay_s:
            raise subprocess.TimeoutExpired(self.argv, timeout)
        self.returncode = self.reply.returncode
        return self.reply.stdout, self.reply.stderr

    def kill(self) -> None:
        self.killed.set()


@dataclass
class FakeSlurm:
    """A starter for ask_at_once: the reply of each command by its first words ("scontrol show partition",
    "scontrol ping", "sacctmgr", "sbatch"); the processes it started, by those words."""

    replies: dict[str, Reply]
    started: dict[str, FakeProcess] = field(default_factory=dict)

    def __call__(self, argv: list[str], **_popen: object) -> FakeProcess:
        words = next(key for key in sorted(self.replies, key=len, reverse=True) if " ".join(argv).startswith(key))
        if self.replies[words].missing:
            raise FileNotFoundError(2, "No such file or directory", argv[0])
        self.started[words] = FakeProcess(argv, self.replies[words])
        return self.started[words]


def live_replies(delay_s: float = 0.0) -> dict[str, Reply]:
    """The test cluster's answers as recorded (tests/fixtures/scontrol/README.md), each after `delay_s`."""
    def recorded(name: str) -> str:
        return (SCONTROL_FIXTURES / name).read_text()

    return {
        "scontrol ping": Reply("Slurmctld(primary) at vm is UP\n", delay_s=delay_s),
        "scontrol show partition": Reply(recorded("local-partition.txt"), delay_s=delay_s),
        "scontrol show node": Reply(recorded("local-node.txt"), delay_s=delay_s),
        "scontrol --version": Reply(recorded("local-version.txt"), delay_s=delay_s),
        "scontrol show config": Reply("AccountingStorageEnforce = associations\n", delay_s=delay_s),
        "sacctmgr": Reply("project_2001234|\n", delay_s=delay_s),
        "sbatch": Reply(stderr="sbatch: Job 7 to start at 2026-11-29T02:20:26 using 1 processors on nodes vm in "
                        "partition debug\n", delay_s=delay_s),
    }


def all_missing() -> Callable[..., FakeProcess]:
    def start(argv: list[str], **_popen: object) -> FakeProcess:
        raise FileNotFoundError(2, "No such file or directory", argv[0])
    return start
