"""A build step's live progress on a terminal, and tools' output lines made readable for it and the log."""

from __future__ import annotations

import re
from typing import TextIO

_ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_SPINNER = re.compile(r"^[\u2800-\u28ff]\s*")


def clean_line(raw: str) -> str:
    """A tool's output line as text: without colour codes and without the frames a console spinner drew
    before the final text (cotainr redraws its line with carriage returns)."""
    text = _ANSI_ESCAPE.sub("", raw.rstrip("\n")).rsplit("\r", 1)[-1]
    return _SPINNER.sub("", text)


class Progress:
    """A one-line ticking timer on a terminal; silent when output is not a terminal."""

    def __init__(self, label: str, out: TextIO, *, enabled: bool) -> None:
        self.label = label
        self.out = out
        self.enabled = enabled and out.isatty()
        self._status = None

    def __enter__(self) -> Progress:
        if self.enabled:
            from rich.console import Console

            self._status = Console(file=self.out).status(self.label)
            self._status.__enter__()
        return self

    def update(self, line: str) -> None:
        """Show the tool's latest output line after the step's label (a terminal only)."""
        if self._status is not None:
            from rich.markup import escape

            self._status.update(f"{escape(self.label)} [dim]{escape(line.strip()[:100])}[/dim]")

    def __exit__(self, *exc: object) -> None:
        if self._status is not None:
            self._status.__exit__(None, None, None)
            self._status = None
