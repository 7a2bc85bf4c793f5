"""The scaling plot: throughput (or speed-up, when the runs printed no metric line) and parallel efficiency
against GPUs/processes, each with its ideal line dashed. matplotlib is imported here only, with the Agg
backend (no display on a login node), so nothing else of envrun pays for it."""

from __future__ import annotations

import io

from envbuild.slurm.sweep.points import plural
from envbuild.slurm.sweep.table import Row


def render_png(rows: list[Row], title: str = "") -> bytes:
    """The plot as PNG bytes. Every text is drawn literally: the title is the user's command and the unit is
    what the training printed, and `$SCRATCH/x` or `a_b^c` must not go through mathtext (or LaTeX, with a
    matplotlibrc that turns usetex on), which fails on them or draws something else."""
    import matplotlib

    matplotlib.use("Agg")
    with matplotlib.rc_context({"text.parse_math": False, "text.usetex": False}):
        return _render(rows, title)


def _render(rows: list[Row], title: str) -> bytes:
    from matplotlib.figure import Figure

    done = [r for r in rows if r.time_s is not None and r.speedup is not None]
    figure = Figure(figsize=(9, 3.8), dpi=100)
    left, right = figure.subplots(1, 2)
    if done:
        base = done[0]
        scale = [r.point.workers for r in done]
        nodes = [r.point.nodes for r in done]
        unit = base.point.unit
        ideal_scale = [w / base.point.workers for w in scale]
        by_throughput = all(r.throughput is not None for r in done) and bool(base.throughput)
        if by_throughput:
            values = [r.throughput or 0.0 for r in done]
            ideal = [(base.throughput or 0.0) * s for s in ideal_scale]
            left.set_ylabel(f"throughput ({base.unit})")
        else:
            values = [r.speedup or 0.0 for r in done]
            ideal = ideal_scale
            left.set_ylabel(f"speed-up vs {base.point.workers} {plural(unit, base.point.workers)}")
        left.plot(scale, values, "o-", color="tab:blue", label="measured (median)")
        ranges = [r.throughput_range for r in done if r.throughput_range and r.runs > 1]
        if by_throughput and len(ranges) == len(done):
            low = [v - lo for v, (lo, _hi) in zip(values, ranges, strict=True)]
            high = [hi - v for v, (_lo, hi) in zip(values, ranges, strict=True)]
            left.errorbar(scale, values, yerr=[low, high], fmt="none", ecolor="tab:blue", capsize=4, alpha=0.6,
                          label="slowest to fastest run")
        left.plot(scale, ideal, "--", color="gray", label="ideal")
        left.set_ylim(bottom=0)
        right.plot(scale, [100 * (r.efficiency or 0) for r in done], "o-", color="tab:orange", label="measured (median)")
        right.plot(scale, [100] * len(scale), "--", color="gray", label="ideal")
        right.set_ylim(0, max(110, *(100 * (r.efficiency or 0) + 10 for r in done)))
        right.set_ylabel("parallel efficiency (%)")
        for axes in (left, right):
            axes.set_xlabel(plural(unit) + (f" on {nodes[0]} node{'s' if nodes[0] > 1 else ''}" if len(set(nodes)) == 1
                                            else " (nodes: " + ", ".join(map(str, nodes)) + ")"))
            axes.set_xticks(scale)
            axes.grid(alpha=0.3)
            axes.legend(loc="best")
    if title:
        figure.suptitle(title, fontsize=10)
    figure.tight_layout()
    out = io.BytesIO()
    figure.savefig(out, format="png")
    return out.getvalue()
