"""A step's report as a person reads it: the summary envrun prints after the step, and the files of `--report DIR`:
report.json (schema "envrun-report/1", documented in docs/concepts/report.md), report.html (one self-contained
page: inline CSS and script, the timeline embedded as a data: URI), timeline.png and summary.txt. The picture and
the page are drawn from the same Report: nothing is computed twice.

The text and the JSON are pure; write_report writes the files. matplotlib is imported only to draw the
timeline, with the Agg backend (no display on a compute node); if it cannot, the page says why and the other
files are still written.
"""

from __future__ import annotations

import json
import os
import time

from envbuild.report.reportmodel import GpuSummary, RankSummary, Report
from envbuild.report.stepfindings import numbers
from envbuild.shared.safefiles import open_dir, subdir, write_file

TYPE_CHECKING = False  # mypy reads the block below; envrun's light path does without the typing module
if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
    from matplotlib.typing import ColorType

SCHEMA = "envrun-report/1"
MAX_NODES_SHOWN = 8  # in the summary and the plot; report.json holds them all
MAX_LISTED = 8  # ranks or GPUs of a node listed one by one in the summary; more are summed up
# A rank "ended early" (marked in the timeline, listed under the page's phases) when its program ended more than
# this long before the step's end: a share of the step, and at least some seconds, so that the ordinary end of
# a step (the ranks exit, then srun and the samplers finish) is not marked.
EARLY_END_SHARE = 0.1
EARLY_END_MIN_S = 1.0
STARTUP_SHOWN_S = 1.0  # the summary names a node's container start-up from this long
HEADROOM = 1.25  # the panels' top over their scale (the ranks' cores, 100 %): room for the legend and labels
MARKED_POINTS = 40  # a series of this many values or fewer gets a dot at each (a short step's few points)
_GIB = 1024**3


def _pct(value: float | None) -> str:
    return "-" if value is None else str(round(value * 100))


def _gib(value: int | None) -> str:
    return "-" if value is None else f"{value / _GIB:.1f}"


def _memory(values: list[int]) -> tuple[list[str], str]:
    """Sizes in one unit for a line: GiB, or MiB when all are under a GiB (a rank of 300 MiB is not "0.0")."""
    if max(values, default=0) >= _GIB:
        return [_gib(value) for value in values], "GiB"
    return [f"{value / (1 << 20):.0f}" for value in values], "MiB"


def _duration(seconds: float) -> str:
    whole = round(seconds)
    if whole < 60:
        return f"{seconds:.1f} s" if seconds < 10 else f"{whole} s"
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h {minutes:02d}m {secs:02d}s" if hours else f"{minutes}m {secs:02d}s"


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def _round(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def headline(report: Report) -> str:
    """'envrun report: job 42 step 0 (train), 2 nodes, 5m 12s, exit code 0, one sample every 5 s'."""
    job = report.job
    names: list[str] = []
    if job.get("id"):
        names.append(f"job {job['id']}" + (f" step {job['step']}" if job.get("step") else ""))
    if job.get("name"):
        names.append(f"({job['name']})")
    nodes = len(report.nodes)
    every = f", one sample every {report.interval:g} s" if report.interval else ""
    return ("envrun report: " + (" ".join(names) + ", " if names else "") + f"{nodes} node{'s' if nodes != 1 else ''}, "
            f"{_duration(report.duration_s)}, exit code {report.exit_code}{every}")


def _gpu_line(node: str, source: str | None, gpus: list[GpuSummary]) -> str:
    names = sorted({gpu.name for gpu in gpus if gpu.name})
    totals = sorted({gpu.mem_total_bytes for gpu in gpus if gpu.mem_total_bytes})
    what = ", ".join([part for part in (source or "", names[0] if len(names) == 1 else "") if part])
    of = f" of {_gib(totals[0])} GiB" if len(totals) == 1 else ""
    head = f"  {node} GPUs {numbers([gpu.index for gpu in gpus])}{f' ({what})' if what else ''}: "
    if len(gpus) <= MAX_LISTED:
        return (head + f"mean util {' '.join(_pct(gpu.util) for gpu in gpus)} %; memory peak "
                f"{' '.join(_pct(gpu.mem_fraction) for gpu in gpus)} %{of}")
    utils = [gpu.util for gpu in gpus if gpu.util is not None]
    memory = [gpu.mem_fraction for gpu in gpus if gpu.mem_fraction is not None]
    return (head + (f"mean util {_pct(min(utils))}-{_pct(max(utils))} %" if utils else "util -")
            + (f"; memory peak up to {_pct(max(memory))} %{of}" if memory else ""))


def _ranks_line(node: str, ranks: list[RankSummary]) -> str:
    """Each rank's figures, or their range when there are more than MAX_LISTED."""
    cores = sorted({rank.cores for rank in ranks if rank.cores})
    of = f" of {cores[0]}" if len(cores) == 1 else ""
    head = f"  {node} ranks {numbers([rank.rank for rank in ranks])}: "
    if len(ranks) <= MAX_LISTED:
        busy = " ".join("-" if rank.cpu_cores is None else f"{rank.cpu_cores:.1f}" for rank in ranks)
        sizes, unit = _memory([rank.rss_bytes for rank in ranks])
        return (head + f"CPU {busy} cores busy{of} ({' '.join(_pct(rank.cpu_util) for rank in ranks)} %); RSS peak "
                f"{' '.join(sizes)} {unit}; processes "
                f"{' '.join(str(rank.procs) for rank in ranks)}")
    measured = [rank.cpu_cores for rank in ranks if rank.cpu_cores is not None]
    busy = (f"{min(measured):.1f}-{max(measured):.1f} (mean {sum(measured) / len(measured):.1f})" if measured
            else "-")
    sizes, unit = _memory([max(rank.rss_bytes for rank in ranks)])
    return (head + f"CPU {busy} cores busy{of}; RSS peak up to {sizes[0]} {unit}; "
            f"processes up to {max(rank.procs for rank in ranks)}")


def summary_text(report: Report) -> str:
    """A few lines: per node its GPUs' mean utilisation and peak memory and its ranks' CPU use, the findings with
    their fixes, the rules checked, and what was not measured."""
    lines = [headline(report)]
    for node in report.nodes[:MAX_NODES_SHOWN]:
        gpus = report.gpus_of(node.node)
        if gpus:
            lines.append(_gpu_line(node.node, node.gpu_source, gpus))
        ranks = report.ranks_of(node.node)
        if ranks:
            startup = node.startup_s
            lines.append(_ranks_line(node.node, ranks)
                         + (f"; start-up {_duration(startup)}" if startup and startup > STARTUP_SHOWN_S else ""))
        elif node.samples:
            lines.append(f"  {node.node}: no rank seen (no process of the step had RANK in its environment)")
    if len(report.nodes) > MAX_NODES_SHOWN:
        lines.append(f"  ... {len(report.nodes) - MAX_NODES_SHOWN} more nodes in report.json")
    if report.metrics:
        lines.append("  throughput: " + " ".join(f"{key}={value:g}" for key, value in report.metrics.items()))
    for finding in report.findings:
        lines.append(f"  {finding.level}: {finding.what}")
        lines.append(f"    fix: {finding.fix}")
    if report.checked:
        lines.append(f"  checked: {', '.join(report.checked)}" + ("" if report.findings else "; found nothing"))
    else:
        lines.append("  checked: nothing (no rule had measurements to judge)")
    for item in report.not_measured:
        lines.append(f"  not measured: {item}")
    return "\n".join(lines) + "\n"


def report_json(report: Report) -> dict[str, object]:
    """The report as report.json holds it (schema "envrun-report/1")."""
    job = report.job
    return {
        "schema": SCHEMA,
        "job": {"id": job.get("id"), "step": job.get("step"), "name": job.get("name"), "command": report.command,
                "nodelist": job.get("nodes"), "nodes": [node.node for node in report.nodes]},
        "started": _iso(report.started),
        "ended": _iso(report.ended),
        "duration_s": round(report.duration_s, 3),
        "exit_code": report.exit_code,
        "interval_s": report.interval,
        "nodes": [{"node": n.node, "cpus": n.cpus, "gpu_source": n.gpu_source, "gpu_note": n.gpu_note,
                   "gpu_sampling": n.gpu_sampling, "load1_mean": _round(n.load1_mean, 2), "samples": n.samples,
                   "startup_s": _round(n.startup_s)} for n in report.nodes],
        "ranks": [{"rank": r.rank, "node": r.node, "local_rank": r.local_rank, "cpu_util": _round(r.cpu_util),
                   "cpu_cores": _round(r.cpu_cores), "cores": r.cores, "idle_fraction": _round(r.idle_fraction),
                   "cpu_s": _round(r.cpu_s), "cpu_source": r.cpu_source or None, "started_s": _round(r.started_s),
                   "ended_s": _round(r.ended_s), "life_s": _round(r.life_s), "rss_bytes": r.rss_bytes,
                   "threads": r.threads, "procs": r.procs, "intervals": r.intervals,
                   "cgroup_cpu_s": _round(r.cgroup_cpu_s), "cgroup_peak_bytes": r.cgroup_peak_bytes}
                  for r in report.ranks],
        "gpus": [{"node": g.node, "index": g.index, "name": g.name, "util": _round(g.util),
                  "util_max": _round(g.util_max), "busy_fraction": _round(g.busy_fraction),
                  "mem_used_bytes": g.mem_used_bytes, "mem_total_bytes": g.mem_total_bytes,
                  "mem_fraction": _round(g.mem_fraction), "samples": g.samples} for g in report.gpus],
        "launcher": report.launchers,
        "metrics": report.metrics,
        "findings": [finding.as_dict() for finding in report.findings],
        "checked": report.checked,
        "not_measured": report.not_measured,
        "timeline": {
            "t0": _iso(report.started),
            "nodes": [{"node": line.node, "stride": line.stride, "t": line.t,
                       "ranks": {key.split(" ", 1)[1]: [_round(v) for v in values]
                                 for key, values in line.series.items() if key.startswith("rank ")},
                       "gpus": {key.split(" ", 1)[1]: [_round(v) for v in values]
                                for key, values in line.series.items() if key.startswith("GPU ")}}
                      for line in report.timeline],
        },
        "records": {"read": report.records, "rejected": report.rejected},
    }


def _early_end(report: Report, rank: RankSummary | None) -> float | None:
    """When `rank` ended well before the step did (an early exit): its end, seconds after the step's start."""
    if rank is None or rank.ended_s is None:
        return None
    before_end = report.duration_s - rank.ended_s
    return rank.ended_s if before_end > max(EARLY_END_MIN_S, EARLY_END_SHARE * report.duration_s) else None


def step_segments(t: list[float], values: list[float | None], start: float | None = None,
                  end: float | None = None) -> list[tuple[float, float, float]]:
    """(begin, end, value) of each interval value: a value holds over (previous t, t]. The first interval begins
    at `start` (the rank's program start) where that comes after the previous point, none is drawn after `end`
    (the rank's end); a value with no known beginning (the series' first point, no start) has no width."""
    segments: list[tuple[float, float, float]] = []
    for index, (time_s, value) in enumerate(zip(t, values, strict=True)):
        if value is None or (start is not None and time_s <= start):
            continue
        begin = t[index - 1] if index else None
        if start is not None and (begin is None or begin < start):
            begin = start
        if begin is None:
            begin = time_s
        if end is not None and begin >= end:
            break
        segments.append((begin, time_s if end is None else min(time_s, end), value))
    return segments


def step_points(segments: list[tuple[float, float, float]]) -> tuple[list[float], list[float]]:
    """The corners of the step line through `segments`; NaN breaks it where one does not begin at the previous
    one's end (a missing value)."""
    xs: list[float] = []
    ys: list[float] = []
    for begin, finish, value in segments:
        if xs and begin > xs[-1]:
            xs.append(float("nan"))
            ys.append(float("nan"))
        xs += [begin, finish]
        ys += [value, value]
    return xs, ys


def render_png(report: Report) -> bytes:
    """timeline.png: timeline_figure drawn with Agg (no display on a compute node)."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    with matplotlib.rc_context({"text.parse_math": False, "text.usetex": False}):  # a name is not mathtext
        out = io.BytesIO()
        timeline_figure(report).savefig(out, format="png")
        return out.getvalue()


def timeline_figure(report: Report) -> Figure:
    """The timeline, per node against the time since the step started (seconds for a step under two minutes,
    else minutes), from the step's start to its end: the ranks' busy cores on a scale of the ranks' own cores, and
    beside it the GPUs' utilisation (%) only where the node had measured GPUs. Each value is drawn as a step over
    the interval it covers, a rank's line from its program's start; container start-up is shaded, an early exit
    marked. Text is drawn literally."""
    import matplotlib
    from matplotlib.figure import Figure

    lines = [line for line in report.timeline if line.t][:MAX_NODES_SHOWN]
    if not lines:
        raise ValueError("no samples to draw")
    duration = max([report.duration_s] + [line.t[-1] for line in lines]) or 1.0
    per, unit = (1.0, "seconds") if duration < 120 else (60.0, "minutes")
    with matplotlib.rc_context({"text.parse_math": False, "text.usetex": False}):
        figure = Figure(figsize=(10, 2.6 * len(lines) + 0.6), dpi=100)
        grid = figure.add_gridspec(len(lines), 2)
        for row, line in enumerate(lines):
            node = report.node(line.node)
            ranks = {rank.rank: rank for rank in report.ranks_of(line.node)}
            gpu_series = {key: values for key, values in line.series.items()
                          if key.startswith("GPU ") and any(value is not None for value in values)}
            rank_series = {key: values for key, values in line.series.items() if not key.startswith("GPU ")}
            if gpu_series:
                gpu_axes = figure.add_subplot(grid[row, 0])
                cpu_axes = figure.add_subplot(grid[row, 1])
                panels = [gpu_axes, cpu_axes]
                gpu_axes.set_title(f"{line.node}: GPUs", fontsize=9, loc="left")
                for key, values in gpu_series.items():
                    _draw_series(gpu_axes, step_segments(line.t, [None if v is None else v * 100 for v in values]),
                                 key, per)
                gpu_axes.set_ylim(-3, 100 * HEADROOM)
                gpu_axes.set_yticks([0, 25, 50, 75, 100])
                gpu_axes.set_ylabel("GPU util (%)")
            else:  # no GPU panel: the ranks take the width
                cpu_axes = figure.add_subplot(grid[row, :])
                panels = [cpu_axes]
            cpu_axes.set_title(f"{line.node}: ranks" + ("" if gpu_series else " (no GPU measured on this node)"),
                               fontsize=9, loc="left")
            largest = 0.0
            for key, values in rank_series.items():
                number = _rank_number(key)
                rank = None if number is None else ranks.get(number)
                ended = _early_end(report, rank)
                segments = step_segments(line.t, values, None if rank is None else rank.started_s,
                                         None if rank is None else rank.ended_s)
                colour = _draw_series(cpu_axes, segments, key if ended is None else f"{key} (ended at "
                                      f"{_duration(ended)})", per)
                if ended is not None and segments:
                    cpu_axes.plot([segments[-1][1] / per], [segments[-1][2]], marker="X", markersize=8,
                                  linestyle="none", color=colour, zorder=4, label="_end")
                largest = max([largest] + [value for _, _, value in segments])
            cores = sorted({rank.cores for rank in ranks.values() if rank.cores})
            top = max(cores[-1] if cores else 0, largest) or 1.0
            # A rank at 0 is drawn above the axis line; room above the ranks' cores (dotted) for the labels.
            cpu_axes.set_ylim(-0.04 * top, top * HEADROOM)
            if cores:
                cpu_axes.axhline(cores[-1], color="0.5", linestyle=":", linewidth=1, zorder=1)
            of = f" (of {'up to ' if len(cores) > 1 else ''}{cores[-1]} per rank)" if cores else " per rank"
            cpu_axes.set_ylabel(f"busy cores{of}")
            startup = None if node is None else node.startup_s
            for target in panels:
                target.set_xlim(0, duration / per)
                target.set_axisbelow(True)
                target.grid(alpha=0.3)
                if startup:
                    target.axvspan(0, startup / per, color="0.88", zorder=0, linewidth=0)
                    wide = startup / duration >= 0.15
                    target.text(startup / per / 2 if wide else startup / per, 0.97, "container start-up",
                                ha="center" if wide else "left", va="top", fontsize=7, color="0.35",
                                transform=target.get_xaxis_transform())
                if row == len(lines) - 1:
                    target.set_xlabel(f"{unit} since the step started")
                handles = target.get_legend_handles_labels()[0]
                if 0 < len(handles) <= 16:
                    target.legend(loc="upper right", fontsize=7, ncol=2, framealpha=0.8)
        figure.suptitle(" ".join(report.command)[:100], fontsize=9)
        figure.tight_layout()
    return figure


def _rank_number(key: str) -> int | None:
    number = key.rsplit(" ", 1)[-1]
    return int(number) if number.isdigit() else None


def _draw_series(axes: Axes, segments: list[tuple[float, float, float]], label: str,
                 per: float) -> ColorType | None:
    """One series as steps above the grid, with a dot at each value when there are few (a short step, a value
    of no known width); its colour (None: nothing to draw)."""
    if not segments:
        return None
    xs, ys = step_points(segments)
    drawn = axes.plot([x / per for x in xs], ys, label=label, linewidth=1.2, zorder=3)[0]
    colour = drawn.get_color()
    if len(segments) <= MARKED_POINTS:
        axes.plot([finish / per for _, finish, _ in segments], [value for _, _, value in segments], marker="o",
                  markersize=3, linestyle="none", color=colour, zorder=3, label="_points")
    return colour


# Sorts a table.sortable by the column whose header is clicked (again: the other way). Each cell's data-v holds
# the value to sort by (a number where there is one); a cell without it sorts last.
_SORT_SCRIPT = """
document.querySelectorAll("table.sortable th").forEach(function (th) {
  th.addEventListener("click", function () {
    var table = th.closest("table"), column = th.cellIndex, body = table.tBodies[0];
    var up = th.getAttribute("aria-sort") !== "ascending";
    table.querySelectorAll("th").forEach(function (other) { other.removeAttribute("aria-sort"); });
    th.setAttribute("aria-sort", up ? "ascending" : "descending");
    var key = function (row) { var v = row.cells[column].getAttribute("data-v"); return v === null ? null : v; };
    Array.prototype.slice.call(body.rows).sort(function (a, b) {
      var x = key(a), y = key(b);
      if (x === null || y === null) { return (x === null) - (y === null); }
      var order = (x !== "" && y !== "" && isFinite(x) && isFinite(y)) ? x - y
        : x.localeCompare(y, undefined, {numeric: true});
      return up ? order : -order;
    }).forEach(function (row) { body.appendChild(row); });
  });
});
"""


def _seconds(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def render_html(report: Report, png: bytes | None, no_png: str) -> str:
    """One page with everything in it: the PNG as a data: URI, the ranks in a table sorted by clicking a header
    (a few lines of inline script; without it the table reads in rank order). Every value is escaped."""
    import base64
    from html import escape

    def table(header: list[str], rows: list[list[str]]) -> str:
        head = "".join(f"<th>{escape(cell)}</th>" for cell in header)
        body = "".join("<tr>" + "".join(f"<td>{escape(cell)}</td>" for cell in row) + "</tr>\n" for row in rows)
        return f"<table><thead><tr>{head}</tr></thead>\n<tbody>{body}</tbody></table>"

    def sortable(header: list[str], rows: list[list[tuple[str, object]]]) -> str:
        """Cells as (text shown, value sorted by: a number, a text, or None to sort last)."""
        head = "".join(f'<th title="sort by {escape(cell)}">{escape(cell)}</th>' for cell in header)
        body = "".join("<tr>" + "".join(
            f"<td>{escape(text)}</td>" if key is None else f'<td data-v="{escape(str(key))}">{escape(text)}</td>'
            for text, key in row) + "</tr>\n" for row in rows)
        return f'<table class="sortable"><thead><tr>{head}</tr></thead>\n<tbody>{body}</tbody></table>'

    findings = "".join(f'<li class="{escape(f.level)}"><b>{escape(f.level)}</b>: {escape(f.what)}<br>'
                       f"fix: {escape(f.fix)}</li>" for f in report.findings)
    if report.gpus:
        gpus = table(["node", "GPU", "name", "mean util %", "max util %", "busy %", "memory peak GiB", "of GiB",
                      "memory %"],
                     [[g.node, str(g.index), g.name, _pct(g.util), _pct(g.util_max), _pct(g.busy_fraction),
                       _gib(g.mem_used_bytes), _gib(g.mem_total_bytes), _pct(g.mem_fraction)] for g in report.gpus])
    else:  # no empty table: one line that says why
        why = [item for item in report.not_measured if item.lower().startswith("gpu")]
        gpus = f"<p>No GPU was measured{': ' + escape(why[0]) if why else '.'}</p>"
    sizes, unit = _memory([r.rss_bytes for r in report.ranks])
    ranks = sortable(
        ["rank", "node", "local rank", "CPU s", "life s", "mean busy cores", "cores", "% of cores", "idle %",
         "CPU source", f"RSS peak {unit}", "threads", "processes"],
        [[(str(r.rank), r.rank), (r.node, r.node),
          ("-" if r.local_rank is None else str(r.local_rank), r.local_rank),
          (_seconds(r.cpu_s), r.cpu_s), (_seconds(r.life_s), r.life_s),
          ("-" if r.cpu_cores is None else f"{r.cpu_cores:.2f}", r.cpu_cores), (str(r.cores or "-"), r.cores),
          (_pct(r.cpu_util), r.cpu_util), (_pct(r.idle_fraction), r.idle_fraction),
          (r.cpu_source or "-", r.cpu_source or None), (size, r.rss_bytes), (str(r.threads), r.threads),
          (str(r.procs), r.procs)]
         for r, size in zip(report.ranks, sizes, strict=True)])
    nodes = table(["node", "CPUs", "start-up s", "GPU source", "GPU sampling", "note", "mean load", "samples"],
                  [[n.node, str(n.cpus or "-"), _seconds(n.startup_s), n.gpu_source or "none", n.gpu_sampling or "-",
                    n.gpu_note, "-" if n.load1_mean is None else f"{n.load1_mean:.2f}", str(n.samples)]
                   for n in report.nodes])
    phases = [f"{n.node}: container start-up, from the step's start to its first rank's program, "
              f"{_duration(n.startup_s)}" for n in report.nodes if n.startup_s is not None]
    for r in report.ranks:
        ended = _early_end(report, r)
        if ended is not None:
            phases.append(f"rank {r.rank} ({r.node}) ended at {_duration(ended)}, "
                          f"{_duration(report.duration_s - ended)} before the step's end")
    phase_list = "".join(f"<li>{escape(item)}</li>" for item in phases)
    picture = (f'<img alt="busy cores per rank and GPU utilisation over time" src="data:image/png;base64,'
               f'{base64.b64encode(png).decode()}">' if png else f"<p>(no timeline: {escape(no_png)})</p>")
    unmeasured = "".join(f"<li>{escape(item)}</li>" for item in report.not_measured)
    metrics = " ".join(f"{key}={value:g}" for key, value in report.metrics.items())
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{escape(headline(report))}</title>
<style>body{{font-family:sans-serif;max-width:75em;margin:2em auto}}table{{border-collapse:collapse;margin:.5em 0}}
td,th{{border:1px solid #bbb;padding:.2em .5em;text-align:right}}img{{max-width:100%}}
table.sortable th{{cursor:pointer;background:#f3f3f3}}th[aria-sort=ascending]::after{{content:" \\25b2"}}
th[aria-sort=descending]::after{{content:" \\25bc"}}
li.problem b{{color:#b00}}li.note b{{color:#a60}}li{{margin:.3em 0}}</style></head>
<body><h1>Step report</h1>
<p>{escape(headline(report))}<br><code>{escape(" ".join(report.command))}</code><br>
{escape(_iso(report.started))} to {escape(_iso(report.ended))}{f"<br>throughput: {escape(metrics)}" if metrics else ""}</p>
<h2>Findings</h2>
{f"<ul>{findings}</ul>" if findings else "<p>None.</p>"}
<p>Checked: {escape(", ".join(report.checked) or "nothing (no rule had measurements to judge)")}.</p>
{f"<h2>Not measured</h2><ul>{unmeasured}</ul>" if unmeasured else ""}
<h2>Timeline</h2>
{picture}
{f"<h2>Phases</h2><ul>{phase_list}</ul>" if phase_list else ""}
<h2>Ranks</h2>
<p>Click a column's header to sort by it. CPU s: the rank's CPU seconds over its life (CPU source: read at its
end, <i>exit</i>; its last read before it ended, <i>last-read</i>; still running at the step's end,
<i>running</i>); mean busy cores: CPU s / life s.</p>
{ranks}
<h2>GPUs</h2>
{gpus}
<h2>Nodes</h2>
{nodes}
<script>{_SORT_SCRIPT}</script>
</body></html>
"""


def write_report(report: Report, directory: str) -> list[str]:
    """Write report.json, report.html, timeline.png (when it can be drawn) and summary.txt into `directory`
    (made when missing); the paths written.

    The report directory's own name (OUTPUT.report beside the job's output, maybe in a directory the project's
    members share) is opened without following a link and refused when another user made it; each file is
    written through that descriptor (envbuild.shared.safefiles.write_file: a new file with an unpredictable name,
    renamed over the old one), so nothing planted there is written through."""
    fd = _open_report_dir(directory)
    written: list[str] = []

    def put(name: str, data: bytes | str) -> None:
        write_file(name, data, dir_fd=fd)
        written.append(os.path.join(directory, name))

    try:
        put("report.json", json.dumps(report_json(report), indent=1) + "\n")
        png: bytes | None = None
        no_png = ""
        try:
            png = render_png(report)
        except Exception as exc:  # noqa: BLE001 - any drawing failure costs the picture, never the report
            no_png = f"{type(exc).__name__}: {exc}"
        put("report.html", render_html(report, png, no_png))
        if png:
            put("timeline.png", png)
        put("summary.txt", summary_text(report))
    finally:
        os.close(fd)
    return written


def _open_report_dir(directory: str) -> int:
    parent, name = os.path.split(os.path.normpath(directory))
    if name in ("", ".", ".."):
        return open_dir(directory, create=True, mode=0o755)
    parent_fd = open_dir(parent or ".", create=True, mode=0o755)
    try:
        return subdir(parent_fd, name, create=True, mode=0o755, where=directory)
    finally:
        os.close(parent_fd)
