"""Signals that end a command as a clean, reported interruption instead of an instant death.

Slurm sends SIGTERM at a job's time limit and on `scancel` (then SIGKILL after KillWait, 30 s by
default: https://slurm.schedmd.com/slurm.conf.html#OPT_KillWait), a closed terminal or ssh session
sends SIGHUP, and Ctrl-C sends SIGINT. Python's default for SIGTERM and SIGHUP is to die on the spot,
which left a build's work directory (hundreds of MB even for a small spec) and half-written layers in the store.
Inside `interruptible()`, each of the three raises `Interrupted` in the main thread instead, so the
executor stops its tool, removes what the step had begun and releases its locks, and the CLI exits with
128 + the signal's number, as a shell reports a process killed by it.

Only the first signal interrupts: one that comes while the cleanup runs (a second Ctrl-C) is noted and
otherwise ignored, so the cleanup is never cut in half by impatience.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator

HANDLED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupted(BaseException):
    """A handled signal arrived. A BaseException, like KeyboardInterrupt: `except Exception` blocks that
    turn tool failures into messages must not swallow it."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(signal.Signals(signum).name)

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


_state = {"raised": False}


def _handler(signum: int, frame: object) -> None:
    if _state["raised"]:
        os.write(2, f"envbuild: {signal.Signals(signum).name} while cleaning up; finishing the cleanup first\n".encode())
        return
    _state["raised"] = True
    raise Interrupted(signum)


@contextlib.contextmanager
def interruptible() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP raise `Interrupted` while the block runs (main thread only; elsewhere,
    and for signals the parent set to be ignored, such as SIGHUP under nohup, nothing changes)."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {}
    for signum in HANDLED:
        current = signal.getsignal(signum)
        if current == signal.SIG_IGN:
            continue  # nohup, or a batch system that wants the process to survive it: keep that choice
        previous[signum] = current
        signal.signal(signum, _handler)
    _state["raised"] = False
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
