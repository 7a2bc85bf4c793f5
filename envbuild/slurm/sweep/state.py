"""A sweep's report directory: sweep.json records what was asked and every run, rewritten (atomically) after
each change, so that running the same sweep again with the same -o/--output dir skips finished runs, follows
jobs still in the queue and retries failed ones. Reading and deciding are pure; `save` writes the file and
`write_reports` the tables and the report.

    REPORT/sweep.json      this state
    REPORT/jobs/KEY-rN.sbatch, REPORT/jobs/KEY-rN-JOBID.out   each run's script and output
    REPORT/table.txt, table.csv, table.json, scaling.png, report.html   rendered by envbuild.slurm.sweep.sweepfiles,
                                                             written by write_reports
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from envbuild.shared.errors import EnvbuildError
from envbuild.slurm.sweep.points import ScalePoint
from envbuild.slurm.sweep.sweepfiles import render_csv, render_html, render_json
from envbuild.slurm.sweep.table import Row, Run, render_text

if TYPE_CHECKING:
    from collections.abc import Callable

STATE_FILE = "sweep.json"
SUBMITTED = "SUBMITTED"  # a run whose job was submitted and has not been seen ending
FORMAT = 1


@dataclass
class SweepState:
    """`identity`: what makes two sweeps the same (command, system, image, launcher, axis); points may grow
    and repeats may rise between runs of the same sweep."""

    identity: dict[str, Any]
    points: list[ScalePoint] = field(default_factory=list)
    runs: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # point key -> one record per repeat

    def record(self, point: ScalePoint, run: dict[str, Any]) -> None:
        """Put a run's record in place of any earlier one of the same repeat (a retry replaces the failure)."""
        mine = [r for r in self.runs.get(point.key, []) if r["repeat"] != run["repeat"]]
        self.runs[point.key] = sorted([*mine, run], key=lambda r: r["repeat"])

    def run_of(self, point: ScalePoint, repeat: int) -> dict[str, Any] | None:
        return next((r for r in self.runs.get(point.key, []) if r["repeat"] == repeat), None)

    def table_runs(self) -> dict[str, list[Run]]:
        """The records as table runs; a run still SUBMITTED is left out (it has no result yet)."""
        out: dict[str, list[Run]] = {}
        for key, records in self.runs.items():
            out[key] = [to_run(r) for r in records if r.get("state") != SUBMITTED]
        return out


def to_run(record: dict[str, Any]) -> Run:
    names = set(Run.__dataclass_fields__)
    return Run(**{k: v for k, v in record.items() if k in names})


def todo(state: SweepState, points: list[ScalePoint], repeat: int) -> list[tuple[ScalePoint, int, str]]:
    """(point, repeat, what to do): "follow" a submitted job, "run" a missing or failed one; finished runs
    are skipped."""
    out = []
    for point in points:
        for index in range(repeat):
            record = state.run_of(point, index)
            if record is None:
                out.append((point, index, "run"))
            elif record.get("state") == SUBMITTED:
                out.append((point, index, "follow"))
            elif not to_run(record).ok:
                out.append((point, index, "run"))
    return out


def merge_points(old: list[ScalePoint], new: list[ScalePoint]) -> list[ScalePoint]:
    """Every point of an earlier run of the sweep and the ones asked for now, in order of scale."""
    seen = {p.key: p for p in [*old, *new]}
    return sorted(seen.values(), key=lambda p: (p.workers, p.nodes))


def load(directory: str, identity: dict[str, Any]) -> SweepState:
    """The state in `directory`, or a new one; refuses a directory that holds another sweep."""
    path = os.path.join(directory, STATE_FILE)
    if not os.path.exists(path):
        return SweepState(identity=identity)
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
        points = [ScalePoint(**p) for p in data["points"]]
        runs = {k: list(v) for k, v in data["runs"].items()}
        old_identity = data["identity"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise EnvbuildError(f"{path} is not a sweep state this envrun can read ({exc})",
                            f"give another -o/--output directory, or remove {path} to start the sweep over") from None
    differs = [key for key in sorted(set(identity) | set(old_identity)) if identity.get(key) != old_identity.get(key)]
    if differs:
        key = differs[0]
        raise EnvbuildError(f"{directory} holds another sweep: its {key} was {old_identity.get(key)!r}, now "
                            f"{identity.get(key)!r}",
                            "give another -o/--output directory for a different sweep (re-running the same sweep "
                            "there resumes it)")
    return SweepState(identity=old_identity, points=points, runs=runs)


def save(directory: str, state: SweepState) -> None:
    data = {"format": FORMAT, "identity": state.identity, "points": [asdict(p) for p in state.points],
            "runs": state.runs}
    _write_files(directory, [(STATE_FILE, json.dumps(data, indent=1, sort_keys=True) + "\n")])


def _write_files(directory: str, files: list[tuple[str, str | bytes]]) -> list[str]:
    """Each (name, content) written into the report directory (made when missing) through one descriptor
    of it (envbuild.shared.safefiles.write_file: a link planted at a name is replaced, never written through); the
    paths written."""
    from envbuild.shared.safefiles import open_dir, write_file

    fd = open_dir(directory, create=True)
    try:
        for name, content in files:
            write_file(name, content, dir_fd=fd)
    finally:
        os.close(fd)
    return [os.path.join(directory, name) for name, _ in files]


def write_reports(directory: str, rows: list[Row], identity: dict[str, Any],
                  warn: Callable[[str], object] | None = None) -> list[str]:
    """table.txt, table.csv, table.json, scaling.png (when a point finished) and report.html; the paths.
    The plot is the one part that may fail (matplotlib): the report is written without it, and `warn` says why."""
    files: list[tuple[str, str | bytes]] = [("table.txt", render_text(rows)), ("table.csv", render_csv(rows)),
                                            ("table.json", render_json(rows, identity))]
    written = _write_files(directory, files)
    png, no_plot = None, "fewer than one finished point"
    if any(r.time_s is not None for r in rows):
        try:
            from envbuild.slurm.sweep.plot import render_png

            png = render_png(rows, title=" ".join(identity.get("command", []))[:80])
        except Exception as exc:  # noqa: BLE001 - any matplotlib failure: the tables are worth more than the plot
            no_plot = f"matplotlib could not draw it: {type(exc).__name__}: {exc}"
            if warn is not None:
                warn(f"no scaling plot ({no_plot}); the tables and report.html are written")
        else:
            written += _write_files(directory, [("scaling.png", png)])
    written += _write_files(directory, [("report.html", render_html(rows, identity, png, no_plot,
                                                                    links_from=directory))])
    return written
