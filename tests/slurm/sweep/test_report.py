"""The sweep's files: CSV and JSON text, the HTML page with the plot inside and links to the runs' job reports,
and the plot itself (decoded: its size and that it is not blank)."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path

from envbuild.slurm.sweep.points import plan_points
from envbuild.slurm.sweep.state import write_reports
from envbuild.slurm.sweep.sweepfiles import render_csv, render_html, render_json
from envbuild.slurm.sweep.table import Run, build_table

IDENTITY = {"command": ["python", "train.py"], "system": "local", "image": "/w/env.sif", "launcher": None,
            "overlays": [], "unit": "process"}


def rows():
    points = plan_points("gpus", [1, 2, 4], per_node_capacity=2, unit="process")
    runs = {
        "1n1p": [Run(0, "11", "/r/jobs/1n1p-r1-11.out", "COMPLETED", 0, 10.0, 100.0, "samples/s", 0.9,
                     "/r/jobs/1n1p-r1-11.report/report.html"),
                 Run(1, "12", "/r/jobs/1n1p-r2-12.out", "COMPLETED", 0, 12.0, 90.0, "samples/s", 0.8,
                     "/r/jobs/1n1p-r2-12.report/report.html")],
        "1n2p": [Run(0, "13", "/r/jobs/1n2p-r1-13.out", "COMPLETED", 0, 6.0, 180.0, "samples/s")],
        "2n2p": [Run(0, "14", "/r/jobs/2n2p-r1-14.out", "FAILED", 1, report="/r/jobs/2n2p-r1-14.report/report.html")],
    }
    return build_table(points, runs)


def test_csv_text() -> None:
    assert render_csv(rows()) == (
        "nodes,per_node,workers,unit,runs,failed,median_time_s,throughput,throughput_unit,speedup,efficiency,"
        "gpu_util,spread_pct,status\n"
        "1,1,1,process,2,0,11.0,95.0,samples/s,1.0,1.0,0.85,18.18,ok\n"
        "1,2,2,process,1,0,6.0,180.0,samples/s,1.8947,0.9474,,,ok\n"
        "2,2,4,process,0,1,,,,,,,,failed\n")


def test_json_keeps_the_failed_run_with_its_job_and_log() -> None:
    data = json.loads(render_json(rows(), IDENTITY))
    assert data["sweep"] == IDENTITY
    assert [r["speedup"] for r in data["rows"]] == [1.0, 1.8947, None]
    assert [r["gpu_util"] for r in data["rows"]] == [0.85, None, None]
    assert [r["reports"] for r in data["rows"]] == [
        ["/r/jobs/1n1p-r1-11.report/report.html", "/r/jobs/1n1p-r2-12.report/report.html"], [],
        ["/r/jobs/2n2p-r1-14.report/report.html"]]
    assert data["failed_runs"] == [{"nodes": 2, "per_node": 2, "repeat": 0, "job_id": "14", "state": "FAILED",
                                    "exit_code": 1, "log": "/r/jobs/2n2p-r1-14.out"}]


def test_html_is_one_page_with_the_plot_inside() -> None:
    page = render_html(rows(), IDENTITY, b"\x89PNG fake")
    assert page.startswith("<!DOCTYPE html>") and "data:image/png;base64," + base64.b64encode(b"\x89PNG fake").decode() in page
    assert "<td>1.89x</td>" in page and "job 14 FAILED" in page and 'src="http' not in page
    assert "<th>GPU util</th>" in page and "<td>85%</td>" in page


def test_html_links_each_run_s_job_report_relative_to_the_sweep_directory() -> None:
    page = render_html(rows(), IDENTITY, None, links_from="/r")
    assert ('<td><a href="jobs/1n1p-r1-11.report/report.html">run 1</a>, '
            '<a href="jobs/1n1p-r2-12.report/report.html">run 2</a></td>') in page
    assert '<a href="jobs/2n2p-r1-14.report/report.html">run 1 (failed)</a>' in page
    assert "<th>job report</th>" in page and "<td>-</td></tr>" in page  # 1n2p wrote none


def test_the_plot_is_a_png_of_the_expected_size_and_not_blank(tmp_path: Path) -> None:
    from matplotlib import image

    written = write_reports(str(tmp_path), rows(), IDENTITY)
    assert {Path(p).name for p in written} == {"table.txt", "table.csv", "table.json", "scaling.png", "report.html"}
    png = (tmp_path / "scaling.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    pixels = image.imread(io.BytesIO(png), format="png")
    assert pixels.shape[:2] == (380, 900)
    colours = {tuple(p) for p in pixels.reshape(-1, pixels.shape[2])[::7].round(2).tolist()}
    assert len(colours) > 20  # lines, markers, text: far from a blank canvas
    page = (tmp_path / "report.html").read_text()
    assert base64.b64encode(png).decode() in page


def test_no_finished_point_no_plot(tmp_path: Path) -> None:
    points = plan_points("nodes", [1], per_node_capacity=2, unit="process")
    table = build_table(points, {"1n2p": [Run(0, "9", "x.out", "FAILED", 1)]})
    written = write_reports(str(tmp_path), table, IDENTITY)
    assert not (tmp_path / "scaling.png").exists() and "report.html" in written[-1]
