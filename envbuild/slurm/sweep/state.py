"""A sweep's report directory: sweep.json records what was asked and every run, rewritten (atomically) after
each change, so that running the same sweep again with the same --report dir skips finished runs, follows
jobs still in the queue and retries failed ones. Reading and deciding are pure; `save` writes the file.

    REPORT/sweep.json      this state
    REPORT/jobs/KEY-rN.sbatch, REPORT/jobs/KEY-rN-JOBID.out   each run's script and output
    REPORT/table.csv, table.json, scaling.png, report.html   written by envbuild.slurm.sweep.report
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from typing import Any

from envbuild.errors import EnvbuildError
from envbuild.slurm.sweep.points import ScalePoint
from envbuild.slurm.sweep.table import Run

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
                            f"give another --report directory, or remove {path} to start the sweep over") from None
    differs = [key for key in sorted(set(identity) | set(old_identity)) if identity.get(key) != old_identity.get(key)]
    if differs:
        key = differs[0]
        raise EnvbuildError(f"{directory} holds another sweep: its {key} was {old_identity.get(key)!r}, now "
                            f"{identity.get(key)!r}",
                            "give another --report directory for a different sweep (re-running the same sweep "
                            "there resumes it)")
    return SweepState(identity=old_identity, points=points, runs=runs)


def save(directory: str, state: SweepState) -> None:
    from envbuild.atomicfile import atomic_write

    os.makedirs(directory, exist_ok=True)
    data = {"format": FORMAT, "identity": state.identity, "points": [asdict(p) for p in state.points],
            "runs": state.runs}
    atomic_write(os.path.join(directory, STATE_FILE), json.dumps(data, indent=1, sort_keys=True) + "\n")
