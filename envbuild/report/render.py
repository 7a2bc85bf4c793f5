"""A step's report as a person reads it: the summary envrun prints after the step, and the files of `--report DIR`:
report.json (schema "envrun-report/1", documented in docs/concepts/report.md), report.html (one self-contained
page: inline CSS, the timeline embedded as a data: URI), timeline.png and summary.txt.

The text and the JSON are pure; write_report writes the files. matplotlib is imported only to draw the
timeline, with the Agg backend (no display on a compute node); if it cannot, the page says why and the other
files are still written.
"""

from __future__ import annotations

import json
import os
import time

from envbuild.report.findings import numbers
from envbuild.report.model import GpuSummary, RankSummary, Report
from envbuild.safefiles import open_dir, subdir, write_file

SCHEMA = "envrun-report/1"
MAX_NODES_SHOWN = 8  # in the summary and the plot; report.json holds them all
MAX_LISTED = 8  # ranks or GPUs of a node listed one by one in the summary; more are summed up
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
            lines.append(_ranks_line(node.node, ranks))
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
                   "load1_mean": _round(n.load1_mean, 2), "samples": n.samples} for n in report.nodes],
        "ranks": [{"rank": r.rank, "node": r.node, "local_rank": r.local_rank, "cpu_util": _round(r.cpu_util),
                   "cpu_cores": _round(r.cpu_cores), "cores": r.cores, "idle_fraction": _round(r.idle_fraction),
                   "rss_bytes": r.rss_bytes, "threads": r.threads, "procs": r.procs, "intervals": r.intervals}
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


def render_png(report: Report) -> bytes:
    """The timeline: per node, GPU utilisation (%) left and the ranks' busy cores right, against the time since
    the step started (seconds for a step under two minutes, else minutes). Text is drawn literally (a node name
    is not mathtext)."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    lines = [line for line in report.timeline if line.t][:MAX_NODES_SHOWN]
    if not lines:
        raise ValueError("no samples to draw")
    with matplotlib.rc_context({"text.parse_math": False, "text.usetex": False}):
        figure = Figure(figsize=(9, 2.4 * len(lines) + 0.6), dpi=100)
        axes = figure.subplots(len(lines), 2, squeeze=False)
        per, unit = (1.0, "seconds") if report.duration_s < 120 else (60.0, "minutes")
        for row, line in enumerate(lines):
            minutes = [t / per for t in line.t]
            gpu_axes, cpu_axes = axes[row][0], axes[row][1]
            for key, values in line.series.items():
                target, scale = (gpu_axes, 100.0) if key.startswith("GPU ") else (cpu_axes, 1.0)
                target.plot(minutes, [None if v is None else v * scale for v in values], label=key, linewidth=1)
            gpu_axes.set_ylim(0, 105)
            gpu_axes.set_ylabel(f"{line.node}\nGPU util (%)")
            cpu_axes.set_ylim(bottom=0)
            cpu_axes.set_ylabel("busy cores per rank")
            for target in (gpu_axes, cpu_axes):
                target.grid(alpha=0.3)
                target.set_xlabel(f"{unit} since the step started")
                handles = target.get_legend_handles_labels()[0]
                if 0 < len(handles) <= 16:
                    target.legend(loc="best", fontsize=7, ncol=2)
                elif not handles:
                    target.text(0.5, 0.5, "not measured", ha="center", va="center", transform=target.transAxes)
        figure.suptitle(" ".join(report.command)[:100], fontsize=9)
        figure.tight_layout()
        out = io.BytesIO()
        figure.savefig(out, format="png")
        return out.getvalue()


def render_html(report: Report, png: bytes | None, no_png: str) -> str:
    """One page with everything in it; the PNG as a data: URI."""
    import base64
    from html import escape

    def table(header: list[str], rows: list[list[str]]) -> str:
        head = "".join(f"<th>{escape(cell)}</th>" for cell in header)
        body = "".join("<tr>" + "".join(f"<td>{escape(cell)}</td>" for cell in row) + "</tr>\n" for row in rows)
        return f"<table><tr>{head}</tr>\n{body}</table>"

    findings = "".join(f'<li class="{escape(f.level)}"><b>{escape(f.level)}</b>: {escape(f.what)}<br>'
                       f"fix: {escape(f.fix)}</li>" for f in report.findings)
    gpus = table(["node", "GPU", "name", "mean util %", "max util %", "busy %", "memory peak GiB", "of GiB", "memory %"],
                 [[g.node, str(g.index), g.name, _pct(g.util), _pct(g.util_max), _pct(g.busy_fraction),
                   _gib(g.mem_used_bytes), _gib(g.mem_total_bytes), _pct(g.mem_fraction)] for g in report.gpus])
    sizes, unit = _memory([r.rss_bytes for r in report.ranks])
    ranks = table(["rank", "node", "local rank", "busy cores", "of cores", "CPU %", "idle %", f"RSS peak {unit}",
                   "threads", "processes"],
                  [[str(r.rank), r.node, "-" if r.local_rank is None else str(r.local_rank),
                    "-" if r.cpu_cores is None else f"{r.cpu_cores:.2f}", str(r.cores or "-"), _pct(r.cpu_util),
                    _pct(r.idle_fraction), size, str(r.threads), str(r.procs)]
                   for r, size in zip(report.ranks, sizes, strict=True)])
    nodes = table(["node", "CPUs", "GPU source", "note", "mean load", "samples"],
                  [[n.node, str(n.cpus or "-"), n.gpu_source or "none", n.gpu_note,
                    "-" if n.load1_mean is None else f"{n.load1_mean:.2f}", str(n.samples)] for n in report.nodes])
    picture = (f'<img alt="GPU utilisation and busy cores per rank over time" src="data:image/png;base64,'
               f'{base64.b64encode(png).decode()}">' if png else f"<p>(no timeline: {escape(no_png)})</p>")
    unmeasured = "".join(f"<li>{escape(item)}</li>" for item in report.not_measured)
    metrics = " ".join(f"{key}={value:g}" for key, value in report.metrics.items())
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{escape(headline(report))}</title>
<style>body{{font-family:sans-serif;max-width:70em;margin:2em auto}}table{{border-collapse:collapse;margin:.5em 0}}
td,th{{border:1px solid #bbb;padding:.2em .5em;text-align:right}}img{{max-width:100%}}
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
<h2>GPUs</h2>
{gpus}
<h2>Ranks</h2>
{ranks}
<h2>Nodes</h2>
{nodes}
</body></html>
"""


def write_report(report: Report, directory: str) -> list[str]:
    """Write report.json, report.html, timeline.png (when it can be drawn) and summary.txt into `directory`
    (made when missing); the paths written.

    The report directory's own name (OUTPUT.report beside the job's output, maybe in a directory the project's
    members share) is opened without following a link and refused when another user made it; each file is
    written through that descriptor (envbuild.safefiles.write_file: a new file with an unpredictable name,
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
