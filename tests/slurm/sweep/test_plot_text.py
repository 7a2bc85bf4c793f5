"""The sweep plot draws the user's text literally (issue 28): a command with `$`, `_`, `^` and `\\` is the
title as typed, not mathtext, and a plot that fails for any reason still leaves the tables and report.html."""

from __future__ import annotations

from pathlib import Path

import pytest

from envbuild.slurm.sweep import plot
from envbuild.slurm.sweep.state import write_reports
from tests.slurm.sweep.test_report import IDENTITY, rows

# mathtext fails on `$x_^$` (ParseSyntaxException) and would draw `$SCRATCH/x ... $HOME` as math
HOSTILE = ["python", "train.py", "--data", "$SCRATCH/x", "--out", "$HOME/y_^\\", "--tag", "$x_^$", "a\\b"]


def test_a_command_with_dollars_is_drawn_literally(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from matplotlib.figure import Figure

    drawn: list[tuple[str, bool, bool]] = []

    original = Figure.savefig

    def record(self, *args, **kwargs):  # every text artist of the figure, as it is about to be drawn
        for text in self.findobj(lambda artist: hasattr(artist, "get_parse_math")):
            if text.get_text():
                drawn.append((text.get_text(), text.get_parse_math(), text.get_usetex()))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", record)
    identity = {**IDENTITY, "command": HOSTILE}
    written = write_reports(str(tmp_path), rows(), identity)
    assert {Path(p).name for p in written} >= {"scaling.png", "report.html"}
    title = " ".join(HOSTILE)[:80]
    assert (title, False, False) in drawn
    assert all(not parse_math and not usetex for _text, parse_math, usetex in drawn)


def test_a_unit_with_math_characters_is_drawn(tmp_path: Path) -> None:
    table = rows()
    for row in table:
        row.unit = "tok$_^$/s" if row.unit else row.unit
    write_reports(str(tmp_path), table, {**IDENTITY, "command": HOSTILE})
    assert (tmp_path / "scaling.png").read_bytes()[:4] == b"\x89PNG"


def test_a_plot_that_fails_still_leaves_the_report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*_args, **_kwargs):
        raise ValueError("mathtext says no")

    monkeypatch.setattr(plot, "render_png", broken)
    said: list[str] = []
    written = write_reports(str(tmp_path), rows(), IDENTITY, warn=said.append)
    assert {Path(p).name for p in written} == {"table.txt", "table.csv", "table.json", "report.html"}
    page = (tmp_path / "report.html").read_text()
    assert "no plot: matplotlib could not draw it: ValueError: mathtext says no" in page
    assert said == ["no scaling plot (matplotlib could not draw it: ValueError: mathtext says no); the tables and "
                    "report.html are written"]
