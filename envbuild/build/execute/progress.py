"""Tools' output lines made readable for the live line and the log, and the table of steps at the end of a
build (the live line itself: envbuild.build.execute.heartbeat)."""

from __future__ import annotations

import re
from dataclasses import dataclass

_ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_SPINNER = re.compile(r"^[\u2800-\u28ff]\s*")


# mksquashfs's progress bar, one redraw per line once universal newlines split its carriage returns:
# "[=====\\        ] 300/458  65%"
_PROGRESS_BAR = re.compile(r"^\[[^\]]*\]\s+(\d+)/(\d+)\s+(\d+)%$")


def progress_bar(line: str) -> str | None:
    """A tool's progress-bar redraw as short text for the live line ("65% (300/458 blocks)"); None for any
    other line. Redraws are not logged: a 30 s squash draws hundreds."""
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
