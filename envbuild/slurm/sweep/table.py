"""The scaling table: per point the median time and throughput over its runs, the speed-up and parallel
efficiency against the smallest point that finished, and the spread of its runs. Pure.

Speed-up is throughput / the baseline's throughput when every finished point printed a metric line, else
the baseline's median time / this point's median time (a fixed amount of work: strong scaling, as in the JSC
course's table). Efficiency is speed-up / (workers / the baseline's workers): 1.0 is perfect scaling.
Spread is (slowest - fastest) / median of a point's run times, in percent: how much to trust the median.
GPU util is the mean over a point's finished runs of each run's job report (envbuild.report): the mean
utilisation of the GPUs it measured; "-" where none was measured (no GPU, no report).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from statistics import median

from envbuild.slurm.sweep.points import ScalePoint, plural


@dataclass(frozen=True)
class Run:
    """One finished or failed job of a point."""

    repeat: int
    job_id: str
    log: str
    state: str  # COMPLETED, FAILED, TIMEOUT, ... as Slurm said
    exit_code: int
    time_s: float | None = None  # the step's wall time (the job's, when the step line is missing)
    throughput: float | None = None
    unit: str | None = None  # samples/s or tokens/s
    gpu_util: float | None = None  # 0-1: mean GPU utilisation from the job report; None: not measured
    report: str | None = None  # the job report's report.html, when the job wrote one

    @property
    def ok(self) -> bool:
        return self.state == "COMPLETED" and self.exit_code == 0 and self.time_s is not None


@dataclass
class Row:
    point: ScalePoint
    runs: int = 0  # finished runs behind the numbers
    failed: list[Run] = field(default_factory=list)
    done: list[Run] = field(default_factory=list)
    time_s: float | None = None
    throughput: float | None = None
    throughput_range: tuple[float, float] | None = None  # the lowest and highest of the runs
    unit: str | None = None
    speedup: float | None = None
    efficiency: float | None = None
    spread_pct: float | None = None
    gpu_util: float | None = None  # the mean of its finished runs' GPU utilisation (those that measured it)

    @property
    def reports(self) -> list[Run]:
        """Its runs, finished or failed, that wrote a job report, in order of repeat."""
        return sorted((r for r in [*self.done, *self.failed] if r.report), key=lambda r: r.repeat)

    @property
    def status(self) -> str:
        if self.runs == 0:
            return "failed" if self.failed else "missing"
        return "ok" if not self.failed else f"ok ({len(self.failed)} failed)"


def spread_percent(times: list[float]) -> float | None:
    if len(times) < 2:
        return None
    middle = median(times)
    return (max(times) - min(times)) / middle * 100.0 if middle > 0 else None


def build_table(points: list[ScalePoint], runs: dict[str, list[Run]]) -> list[Row]:
    """One row per point, in order of scale; `runs` maps a point's key to its runs."""
    rows = []
    for point in sorted(points, key=lambda p: (p.workers, p.nodes)):
        row = Row(point=point)
        mine = runs.get(point.key, [])
        done = [r for r in mine if r.ok]
        row.failed = [r for r in mine if not r.ok]
        row.done = done
        utils = [r.gpu_util for r in done if r.gpu_util is not None]
        row.gpu_util = sum(utils) / len(utils) if utils else None
        if done:
            times = [r.time_s for r in done if r.time_s is not None]
            row.runs = len(done)
            row.time_s = median(times)
            row.spread_pct = spread_percent(times)
            rated = [r for r in done if r.throughput is not None]
            if rated:
                values = [r.throughput for r in rated if r.throughput is not None]
                row.throughput = median(values)
                row.throughput_range = (min(values), max(values))
                row.unit = rated[0].unit
        rows.append(row)
    relate(rows)
    return rows


def relate(rows: list[Row]) -> None:
    """Speed-up and efficiency of every finished row against the first finished one."""
    finished = [r for r in rows if r.time_s is not None]
    if not finished:
        return
    base = finished[0]
    base_throughput = base.throughput if all(r.throughput is not None for r in finished) else None
    for row in finished:
        if base_throughput and row.throughput is not None:
            row.speedup = row.throughput / base_throughput
        elif row.time_s and base.time_s:
            row.speedup = base.time_s / row.time_s
        if row.speedup is not None:
            row.efficiency = row.speedup / (row.point.workers / base.point.workers)


def format_seconds(seconds: float | None) -> str:
    """24m48s, 6.9s, 1h02m: as a person reads a wall time."""
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.1f}s"
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"


HEADER = ("nodes", "workers", "runs", "median time", "throughput", "speed-up", "efficiency", "GPU util", "spread",
          "status")


def text_rows(rows: list[Row]) -> list[tuple[str, ...]]:
    out: list[tuple[str, ...]] = []
    for row in rows:
        p = row.point
        out.append((
            str(p.nodes), f"{p.workers} {plural(p.unit, p.workers)}", str(row.runs), format_seconds(row.time_s),
            f"{row.throughput:,.1f} {row.unit}" if row.throughput is not None else "-",
            f"{row.speedup:.2f}x" if row.speedup is not None else "-",
            f"{row.efficiency * 100:.0f}%" if row.efficiency is not None else "-",
            f"{row.gpu_util * 100:.0f}%" if row.gpu_util is not None else "-",
            f"{row.spread_pct:.0f}%" if row.spread_pct is not None else "-",
            row.status,
        ))
    return out


def render_text(rows: list[Row]) -> str:
    """The table as aligned columns, then a line per failed run (its job id and log)."""
    body = [HEADER, *text_rows(rows)]
    widths = [max(len(r[i]) for r in body) for i in range(len(HEADER))]
    last = len(HEADER) - 1  # status: left-aligned, the others right
    lines = ["  ".join(cell.rjust(w) if i < last else cell for i, (cell, w) in enumerate(zip(r, widths, strict=True)))
             .rstrip() for r in body]
    for row in rows:
        for run in row.failed:
            lines.append(f"failed: {row.point.describe()}, run {run.repeat + 1}: job {run.job_id} {run.state}, "
                         f"exit code {run.exit_code}; log {run.log}")
    return "\n".join(lines) + "\n"
