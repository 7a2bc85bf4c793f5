"""The sweep's table as files: CSV and JSON (pure text, golden-tested), and a one-page HTML report holding the
table and the plot (the PNG embedded as a data: URI, so the page is one self-contained file to mail or
attach) and a link to each run's job report (envbuild.report's report.html beside the job's output, relative
to the sweep's directory so the folder can be moved whole). Pure: envbuild.slurm.sweep.state.write_reports
writes them into the report directory."""

from __future__ import annotations

import base64
import csv
import html
import io
import json
import os
from typing import Any

from envbuild.slurm.sweep.table import HEADER, Row, format_seconds, text_rows

CSV_COLUMNS = ("nodes", "per_node", "workers", "unit", "runs", "failed", "median_time_s", "throughput",
               "throughput_unit", "speedup", "efficiency", "gpu_util", "spread_pct", "status")


def _number(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(value, digits)


def row_record(row: Row) -> dict[str, Any]:
    p = row.point
    return {
        "nodes": p.nodes, "per_node": p.per_node, "workers": p.workers, "unit": p.unit, "runs": row.runs,
        "failed": len(row.failed), "median_time_s": _number(row.time_s, 3), "throughput": _number(row.throughput, 3),
        "throughput_unit": row.unit, "speedup": _number(row.speedup), "efficiency": _number(row.efficiency),
        "gpu_util": _number(row.gpu_util), "spread_pct": _number(row.spread_pct, 2), "status": row.status,
    }


def render_csv(rows: list[Row]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=CSV_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: ("" if v is None else v) for k, v in row_record(row).items()})
    return out.getvalue()


def render_json(rows: list[Row], identity: dict[str, Any]) -> str:
    failed = [{"nodes": r.point.nodes, "per_node": r.point.per_node, "repeat": run.repeat, "job_id": run.job_id,
               "state": run.state, "exit_code": run.exit_code, "log": run.log} for r in rows for run in r.failed]
    reports = {r.point.key: [run.report for run in r.reports] for r in rows}
    data = {"sweep": identity, "rows": [{**row_record(r), "reports": reports[r.point.key]} for r in rows],
            "failed_runs": failed}
    return json.dumps(data, indent=1, sort_keys=True) + "\n"


def report_links(row: Row, base: str | None) -> str:
    """Links to the row's job reports ("run 1", "run 2 (failed)"), relative to `base` (the sweep's directory)
    when given; "-" when no run wrote one."""
    links = []
    for run in row.reports:
        target = str(run.report)
        if base is not None and os.path.isabs(target):
            target = os.path.relpath(target, base)
        label = f"run {run.repeat + 1}" + ("" if run.ok else " (failed)")
        links.append(f'<a href="{html.escape(target, quote=True)}">{html.escape(label)}</a>')
    return ", ".join(links) or "-"


def render_html(rows: list[Row], identity: dict[str, Any], png: bytes | None,
                no_plot: str = "fewer than one finished point", links_from: str | None = None) -> str:
    """The page; `links_from`: the directory it is written to, which the links to the job reports are relative
    to."""
    command = html.escape(" ".join(identity.get("command", [])))
    cells = "".join(f"<th>{html.escape(h)}</th>" for h in (*HEADER, "job report"))
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in texts)
                   + f"<td>{report_links(row, links_from)}</td></tr>\n"
                   for row, texts in zip(rows, text_rows(rows), strict=True))
    picture = (f'<img alt="throughput and parallel efficiency against scale" src="data:image/png;base64,'
               f'{base64.b64encode(png).decode()}">') if png else f"<p>(no plot: {html.escape(no_plot)})</p>"
    failures = "".join(f"<li>{html.escape(r.point.describe())}, run {run.repeat + 1}: job {html.escape(run.job_id)} "
                       f"{html.escape(run.state)}, exit code {run.exit_code}; log <code>{html.escape(run.log)}</code></li>"
                       for r in rows for run in r.failed)
    base = next((r for r in rows if r.time_s is not None), None)
    note = (f"Speed-up and efficiency against {html.escape(base.point.describe())} "
            f"({html.escape(format_seconds(base.time_s))})." if base else "No point finished.")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>envrun sweep: {command}</title>
<style>body{{font-family:sans-serif;max-width:60em;margin:2em auto}}table{{border-collapse:collapse}}
td,th{{border:1px solid #bbb;padding:.25em .6em;text-align:right}}img{{max-width:100%}}</style></head>
<body><h1>Scaling sweep</h1>
<p><code>{command}</code><br>system {html.escape(str(identity.get("system")))}, image
<code>{html.escape(str(identity.get("image")))}</code>, launcher {html.escape(str(identity.get("launcher")))}</p>
<table><tr>{cells}</tr>
{body}</table>
<p>{note} Spread: (slowest - fastest) / median run time of a point.</p>
{"<h2>Failed runs</h2><ul>" + failures + "</ul>" if failures else ""}
{picture}
</body></html>
"""
