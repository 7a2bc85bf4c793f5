"""What a build (and envrun's waits) show while they run: signs of life during a long step or wait, readable on a
terminal and in a batch log alike; the tools' output lines made readable for that live line and the log; and the
table of steps at the end of a build.

On a terminal: one line redrawn in place (label, elapsed seconds, the tool's latest output). Elsewhere
(a Slurm job's log, CI): plain lines only, never a control character, and `still running: LABEL, N s`
every `interval` seconds, so that a silent debootstrap or squash does not look like a hang.

Light on purpose (standard library only): envrun's waits (`sbatch --submit --wait`) and sweeps use it too.
"""

from __future__ import annotations

import os
import re
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TextIO

DEFAULT_HEARTBEAT_S = 30.0
_REDRAW_S = 1.0  # the terminal line's clock ticks once a second
_CLEAR = "\r\x1b[K"


def heartbeat_interval(value: float | None = None) -> float:
    """Seconds between `still running:` lines: `value` (a --heartbeat option), else $ENVBUILD_HEARTBEAT,
    else 30; 0 turns them off."""
    if value is None:
        text = os.environ.get("ENVBUILD_HEARTBEAT", "").strip()
        try:
            value = float(text) if text else DEFAULT_HEARTBEAT_S
        except ValueError:
            value = DEFAULT_HEARTBEAT_S  # a malformed variable must not stop a build
    return max(0.0, value)


def is_terminal(out: TextIO) -> bool:
    try:
        return out.isatty() and os.environ.get("TERM") != "dumb"
    except (AttributeError, ValueError):
        return False


class LiveLine:
    """The running step's line. Use as a context manager; `detail()` sets the latest output shown on a
    terminal, `say()` prints a lasting line (clearing the live one first). `quiet`: nothing at all.

    With `thread=True` a daemon thread ticks (a tool can be silent for minutes); a polling loop can call
    `tick()` itself instead."""

    def __init__(self, label: str, out: TextIO, *, interval: float | None = None, quiet: bool = False,
                 words: str = "still running", terminal: bool | None = None, thread: bool = True,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.label = label
        self.out = out
        self.quiet = quiet
        self.words = words
        self.terminal = is_terminal(out) if terminal is None else terminal
        self.interval = heartbeat_interval(interval)
        self.clock = clock
        self._detail = ""
        self._started = clock()
        self._last_beat = self._started
        self._drawn = False
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._use_thread = thread

    def __enter__(self) -> LiveLine:
        self._started = self._last_beat = self.clock()
        if self._use_thread and not self.quiet and (self.terminal or self.interval > 0):
            self._thread = threading.Thread(target=self._run, name="envbuild-liveline", daemon=True)
            self._thread.start()
        self.tick()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
        with self._lock:
            self._clear()

    def elapsed(self) -> float:
        return self.clock() - self._started

    def detail(self, text: str) -> None:
        """The tool's latest output line: shown on the terminal line at the next tick."""
        self._detail = text.strip()

    def set_label(self, label: str) -> None:
        self.label = label

    def say(self, text: str) -> None:
        """A lasting line (the live line is redrawn after it on the next tick)."""
        with self._lock:
            self._clear()
            self.out.write(text + "\n")
            self.out.flush()

    def clear_for_output(self) -> None:
        """Other output is about to be written (a job's own lines): clear the terminal line, and count that
        output as the sign of life (the next heartbeat is an interval after it)."""
        with self._lock:
            self._clear()
            self._last_beat = self.clock()

    def tick(self) -> None:
        """Redraw the terminal line, or print a heartbeat when `interval` has passed since the last."""
        if self.quiet:
            return
        with self._lock:
            now = self.clock()
            if self.terminal:
                self._draw(now)
            elif self.interval > 0 and now - self._last_beat >= self.interval:
                self._last_beat = now
                self.out.write(f"{self.words}: {self.label}, {now - self._started:.0f} s\n")
                self.out.flush()

    def _run(self) -> None:
        period = _REDRAW_S if self.terminal else min(_REDRAW_S, self.interval)
        while not self._stop.wait(period):
            try:
                self.tick()
            except (OSError, ValueError):
                return  # the output was closed under us: stop ticking, never raise in this thread

    def _draw(self, now: float) -> None:
        width = max(20, shutil.get_terminal_size((100, 24)).columns - 1)
        clock = f"  {now - self._started:.0f} s"
        label = self.label if len(self.label) + len(clock) <= width else self.label[: width - len(clock) - 3] + "..."
        text = label + clock + (f"  {self._detail}" if self._detail else "")  # the clock stays visible
        text = "".join(ch if ch.isprintable() else " " for ch in text)[:width]
        self.out.write(_CLEAR + text)
        self.out.flush()
        self._drawn = True

    def _clear(self) -> None:
        if self._drawn:
            self.out.write(_CLEAR)
            self.out.flush()
            self._drawn = False


# --- tools' output lines and the steps' table ---------------------------------------------------------------

_ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_SPINNER = re.compile(r"^[\u2800-\u28ff]\s*")


# mksquashfs's progress bar, one redraw per line once universal newlines split its carriage returns:
# "[=====\\        ] 300/458  65%"
_PROGRESS_BAR = re.compile(r"^\[[^\]]*\]\s+(\d+)/(\d+)\s+(\d+)%$")


def progress_bar(line: str) -> str | None:
    """A tool's progress-bar redraw as short text for the live line ("65% (300/458 blocks)"); None for any
    other line. Redraws are not logged: a squash draws hundreds."""
    match = _PROGRESS_BAR.match(line.strip())
    return f"{match[3]}% ({match[1]}/{match[2]} blocks)" if match else None


def clean_line(raw: str) -> str:
    """A tool's output line as text: without colour codes and without the frames a console spinner drew
    before the final text (cotainr redraws its line with carriage returns)."""
    text = _ANSI_ESCAPE.sub("", raw.rstrip("\n")).rsplit("\r", 1)[-1]
    return _SPINNER.sub("", text)


@dataclass(frozen=True)
class StepRecord:
    """One step as the end-of-build table shows it."""

    position: str  # "base 1/3"
    title: str
    seconds: float
    cached: bool  # its result was already in the store (the step did not run)


_TITLE_WIDTH = 58


def render_summary(records: list[StepRecord]) -> str:
    """The short table printed at the end of a build: each step, its time, or that the store had it."""
    if not records:
        return ""
    width = max(len(r.position) for r in records)
    lines = []
    for record in records:
        title = record.title if len(record.title) <= _TITLE_WIDTH else record.title[: _TITLE_WIDTH - 3] + "..."
        when = "from the store" if record.cached else f"{record.seconds:6.1f} s"
        lines.append(f"  {record.position:<{width}}  {title:<{_TITLE_WIDTH}}  {when}")
    ran = sum(1 for r in records if not r.cached)
    head = f"steps: {ran} ran, {len(records) - ran} from the store"
    return head + "\n" + "\n".join(lines)
