"""The summary a person reads after a step, and the files of --report DIR: report.json (valid, schema
envrun-report/1), report.html (self-contained, the PNG inside, a sortable rank table), timeline.png (the ranks'
cores as the scale, every rank visible, GPU panels only where GPUs were measured, phases marked) and summary.txt."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from envbuild.report import reportrender as render
from envbuild.report.reportmodel import NodeSummary, NodeTimeline, RankSummary, Report
from envbuild.report.reportrender import (
    render_html,
    render_png,
    report_json,
    step_points,
    step_segments,
    summary_text,
    timeline_figure,
    write_report,
)
from tests.report.test_collect import replay

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def test_summary_of_eight_gpus_with_only_gpu_0_busy() -> None:
    text = summary_text(replay("eight-gpus-one-busy.stream", duration=62.0))
    assert text.splitlines() == [
        "envrun report: job 4242 (train), 1 node, 1m 02s, exit code 0, one sample every 5 s",
        "  g1 GPUs 0-7 (nvidia-smi, NVIDIA A100-SXM4-80GB): mean util 98 0 0 0 0 0 0 0 %; memory peak 90 1 1 1 1 1 1 1 % "
        "of 80.0 GiB",
        "  g1 ranks 0-7: CPU 0.9 0.9 0.9 0.9 0.9 0.9 0.9 0.9 cores busy of 8 (11 11 11 11 11 11 11 11 %); RSS peak "
        "2.0 2.0 2.0 2.0 2.0 2.0 2.0 2.0 GiB; processes 1 1 1 1 1 1 1 1",
        "  problem: node g1: GPU 0 busy 98 %, GPUs 1-7 idle: only one process uses a GPU",
        "    fix: the 8 ranks on this node all compute on one GPU; give each rank its own GPU: "
        "torch.cuda.set_device(int(os.environ['LOCAL_RANK'])) before the model is built, then model.to('cuda') and "
        "DDP(model, device_ids=[local_rank]); a hard-coded 'cuda:0' puts every rank on GPU 0",
        "  checked: one-gpu-busy, idle-gpus, idle-rank, input-bound, gpu-memory, failed-step",
        "  not measured: throughput: the program printed no `envrun-metric:` line",
    ]


def test_summary_names_the_idle_rank_and_what_was_not_measured() -> None:
    text = summary_text(replay("two-ranks-one-sleeps.stream", duration=17.0))
    assert "  n1 ranks 0, 1: CPU 1.0 0.0 cores busy of 2 (49 0 %); RSS peak 2.0 2.0 GiB; processes 1 1\n" in text
    assert "  throughput: samples_per_s=812.5 train_s=15.9\n" in text
    assert "  problem: rank 1 idle 100 % of the step while rank 0 computed\n" in text
    assert ("  not measured: GPUs on n1: no nvidia-smi, amd-smi, rocm-smi or /sys/class/drm GPU on this node\n"
            in text)


def test_summary_of_a_clean_step_says_what_it_checked() -> None:
    text = summary_text(replay("split-and-garbage.stream"))
    assert "  c1 ranks 0-47: CPU 0.5-2.0 (mean 1.2) cores busy of 2; RSS peak up to 2.0 GiB; processes up to 1\n" in text
    assert "  checked: idle-rank, failed-step; found nothing\n" in text
    assert "all good" not in text


def test_summary_of_two_nodes_and_of_a_failed_short_step() -> None:
    two = summary_text(replay("two-nodes.stream"))
    assert "  nid001 GPUs 0-3 (amd-smi, AMD Instinct MI250X): mean util 88 90 92 94 %" in two
    assert "  nid002 ranks 4-7: CPU 2.6 2.6 2.6 2.6 cores busy of 7" in two
    short = summary_text(replay("too-short.stream", duration=2.0))
    assert "exit code 1" in short.splitlines()[0]
    assert "  note: the step ended with exit code 1: the figures cover it until then\n" in short
    # the collector's words for a rank too short to measure are its own (test_collect.py); here: one is said
    assert [line for line in short.splitlines() if line.startswith("  not measured: ") and "n1" in line
            and not line.startswith("  not measured: GPUs")]


def test_report_json_follows_the_schema() -> None:
    data = report_json(replay("two-nodes.stream"))
    assert data["schema"] == "envrun-report/1"
    assert set(data) >= {"job", "started", "ended", "duration_s", "exit_code", "interval_s", "nodes", "ranks", "gpus",
                         "launcher", "metrics", "findings", "not_measured", "timeline", "checked"}
    assert data["job"] == {"id": "4242", "step": None, "name": "train", "command": ["python", "train.py"],
                           "nodelist": None, "nodes": ["nid001", "nid002"]}
    assert data["started"] == "2025-10-09T08:53:20Z" and data["duration_s"] == 60.0
    rank = data["ranks"][0]  # type: ignore[index]
    assert set(rank) == {"rank", "node", "local_rank", "cpu_util", "cpu_cores", "cores", "idle_fraction", "rss_bytes",
                         "threads", "procs", "intervals", "cpu_s", "cpu_source", "started_s", "ended_s", "life_s",
                         "cgroup_cpu_s", "cgroup_peak_bytes"}
    assert set(data["nodes"][0]) == {"node", "cpus", "gpu_source", "gpu_note", "gpu_sampling", "load1_mean",  # type: ignore[index]
                                     "samples", "startup_s"}
    gpu = data["gpus"][7]  # type: ignore[index]
    assert (gpu["node"], gpu["index"], gpu["mem_fraction"]) == ("nid002", 3, pytest.approx(62 / 64, abs=0.001))
    timeline = data["timeline"]["nodes"][0]  # type: ignore[index]
    assert set(timeline["ranks"]) == {"0", "1", "2", "3"} and set(timeline["gpus"]) == {"0", "1", "2", "3"}
    assert len(timeline["t"]) == len(timeline["gpus"]["0"]) == 10
    assert data["findings"] == [{"level": "note", "what": "node nid002: GPU memory 97 % at its peak (GPU 3)",
                                 "fix": data["findings"][0]["fix"], "rule": "gpu-memory"}]  # type: ignore[index]


def test_write_report_writes_valid_files(tmp_path: Path) -> None:
    directory = tmp_path / "reports" / "job-1"
    written = write_report(replay("eight-gpus-one-busy.stream"), str(directory))
    assert [Path(path).name for path in written] == ["report.json", "report.html", "timeline.png", "summary.txt"]
    assert stat.S_IMODE(directory.stat().st_mode) & 0o700 == 0o700
    assert json.loads((directory / "report.json").read_text())["findings"][0]["rule"] == "one-gpu-busy"
    page = (directory / "report.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and 'src="data:image/png;base64,' in page
    assert "only one process uses a GPU" in page
    assert (directory / "timeline.png").read_bytes().startswith(PNG_SIGNATURE)
    assert (directory / "summary.txt").read_text().startswith("envrun report: job 4242")
    assert not [p.name for p in directory.iterdir() if p.name.startswith(".")]  # no partial file left


def test_without_a_timeline_the_page_says_why_and_the_rest_is_written(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(report: object) -> bytes:
        raise ImportError("No module named 'matplotlib'")

    monkeypatch.setattr(render, "render_png", broken)
    written = write_report(replay("two-ranks-one-sleeps.stream"), str(tmp_path))
    assert [Path(path).name for path in written] == ["report.json", "report.html", "summary.txt"]
    assert "(no timeline: ImportError: No module named &#x27;matplotlib&#x27;)" in (tmp_path / "report.html").read_text()
    json.loads((tmp_path / "report.json").read_text())


def test_a_step_with_no_records_still_gets_its_files(tmp_path: Path) -> None:
    from envbuild.report.collect import Collector

    report = Collector(["python", "x.py"], {}).build(2, 10.0, 11.0)
    written = write_report(report, str(tmp_path))
    assert "no timeline: ValueError: no samples to draw" in (tmp_path / "report.html").read_text()
    assert len(written) == 3
    assert json.loads((tmp_path / "report.json").read_text())["exit_code"] == 2


STARTED = 1_760_000_000.0


def cpu_only_step(*, duration: float = 3.2, startup: float = 0.4) -> Report:
    """A short step on a node without GPUs, built by hand: rank 0 computes on its 4 cores, rank 1 waits (0.0
    throughout), rank 2 exits early. Samples come every 0.1 s at first, then further apart."""
    t = [0.5, 0.6, 0.7, 0.9, 1.3, 2.1, 2.9, 3.1]
    ranks = [
        RankSummary(rank=0, node="c1", local_rank=0, cores=4, cpu_cores=3.5, idle_fraction=0.0, rss_bytes=300 << 20,
                    threads=9, procs=1, intervals=8, cpu_s=9.8, cpu_source="exit", started_s=startup, ended_s=3.1),
        RankSummary(rank=1, node="c1", local_rank=1, cores=4, cpu_cores=0.0, idle_fraction=1.0, rss_bytes=200 << 20,
                    threads=3, procs=1, intervals=8, cpu_s=0.0, cpu_source="last-read", started_s=0.45, ended_s=3.1),
        RankSummary(rank=2, node="c1", local_rank=2, cores=4, cpu_cores=1.0, idle_fraction=0.0, rss_bytes=100 << 20,
                    threads=2, procs=2, intervals=4, cpu_s=0.8, cpu_source="exit", started_s=0.45, ended_s=1.3),
    ]
    series: dict[str, list[float | None]] = {
        "rank 0": [3.9, 3.8, 3.9, 3.9, 3.9, 3.9, 3.9, 3.9],
        "rank 1": [0.0] * 8,
        "rank 2": [1.0, 1.0, 1.0, 1.0, 1.0, None, None, None],
    }
    node = NodeSummary(node="c1", cpus=12, gpu_source=None, gpu_note="no GPU tool answered", load1_mean=1.5,
                       samples=8, first=STARTED + 0.5, last=STARTED + 3.1, startup_s=startup)
    return Report(command=["python", "train.py"], job={"id": "7"}, started=STARTED, ended=STARTED + duration,
                  exit_code=0, interval=5.0, nodes=[node], ranks=ranks, gpus=[], launchers={}, metrics={},
                  not_measured=["GPUs on c1: no GPU tool answered"],
                  timeline=[NodeTimeline(node="c1", t=t, series=series, stride=1)], records=9, rejected=0)


def test_interval_values_are_steps_from_the_rank_start_to_its_end() -> None:
    t = [0.5, 0.6, 0.9, 1.3, 2.0]
    values: list[float | None] = [2.0, 3.0, None, 1.0, 0.5]
    segments = step_segments(t, values, start=0.4, end=1.5)
    # each value holds over (previous t, t]; the first from the program's start; nothing after the rank's end
    assert segments == [(0.4, 0.5, 2.0), (0.5, 0.6, 3.0), (0.9, 1.3, 1.0), (1.3, 1.5, 0.5)]
    xs, ys = step_points(segments)
    assert xs[:4] == [0.4, 0.5, 0.5, 0.6] and ys[:4] == [2.0, 2.0, 3.0, 3.0]
    assert xs[4] != xs[4] and ys[4] != ys[4]  # the missing value breaks the line (NaN)
    assert xs[5:] == [0.9, 1.3, 1.3, 1.5] and ys[5:] == [1.0, 1.0, 0.5, 0.5]
    # before the program started there is nothing to draw; without a start the first value has no width
    assert step_segments([0.2, 0.5], [0.0, 1.0], start=0.3) == [(0.3, 0.5, 1.0)]
    assert step_segments([1.0, 2.0], [1.0, 1.0]) == [(1.0, 1.0, 1.0), (1.0, 2.0, 1.0)]


def test_a_cpu_only_short_step_gets_one_panel_in_cores_from_the_step_start() -> None:
    report = cpu_only_step()
    figure = timeline_figure(report)
    (axes,) = figure.axes  # no GPU panel: one panel across the width
    assert axes.get_xlim() == (0.0, pytest.approx(3.2))
    bottom, top = axes.get_ylim()
    assert bottom < 0 and top == pytest.approx(4 * render.HEADROOM)  # the ranks' 4 cores as the scale
    assert [line.get_ydata() for line in axes.get_lines() if line.get_linestyle() == ":"] == [[4, 4]]
    assert axes.get_ylabel() == "busy cores (of 4 per rank)"
    assert "no GPU measured" in axes.get_title(loc="left")
    lines = {line.get_label(): line for line in axes.get_lines()}
    rank0 = lines["rank 0"]
    assert list(rank0.get_xdata())[:2] == [0.4, 0.5]  # starts at its program's start, not at the first sample
    assert list(rank0.get_ydata())[-1] == 3.9  # no dive to 0 at the end
    assert rank0.get_zorder() > 2.5 and axes.get_axisbelow() is True  # the lines above the grid and the axes' lines
    assert set(lines["rank 1"].get_ydata()) == {0.0}
    assert "rank 2 (ended at 1.3 s)" in lines  # the early exit named, and marked
    assert max(lines["rank 2 (ended at 1.3 s)"].get_xdata()) == 1.3
    assert [text.get_text() for text in axes.texts] == ["container start-up"]
    assert axes.patches or axes.collections  # the shaded start-up
    assert render_png(report).startswith(PNG_SIGNATURE)


def test_a_gpu_panel_only_where_the_node_measured_gpus() -> None:
    report = cpu_only_step(duration=200.0)
    gpu = NodeTimeline(node="g1", t=[10.0, 100.0, 190.0],
                       series={"GPU 0": [0.9, 0.95, 0.9], "rank 3": [1.0, 1.0, 1.0]}, stride=1)
    silent = NodeTimeline(node="g2", t=[10.0, 100.0], series={"GPU 0": [None, None], "rank 4": [0.5, 0.5]},
                          stride=1)
    report.timeline += [gpu, silent]
    figure = timeline_figure(report)
    titles = [axes.get_title(loc="left") for axes in figure.axes]
    assert titles == ["c1: ranks (no GPU measured on this node)", "g1: GPUs", "g1: ranks",
                      "g2: ranks (no GPU measured on this node)"]
    assert figure.axes[1].get_ylim() == (-3, 100 * render.HEADROOM)
    assert figure.axes[1].get_xlim() == (0.0, pytest.approx(200 / 60))  # minutes, from the step's start
    assert figure.axes[2].get_ylabel() == "busy cores per rank"  # ranks not in report.ranks: no core count
    assert render_png(report).startswith(PNG_SIGNATURE)


def test_the_page_of_a_cpu_only_step_has_no_gpu_table_and_a_sortable_rank_table() -> None:
    page = render_html(cpu_only_step(), None, "not drawn here")
    assert "<th>GPU</th>" not in page and "<p>No GPU was measured: GPUs on c1: no GPU tool answered</p>" in page
    assert '<table class="sortable">' in page and "<script>" in page and "aria-sort" in page
    for header in ("rank", "node", "local rank", "CPU s", "life s", "mean busy cores", "cores", "% of cores", "idle %",
                   "CPU source", "RSS peak MiB", "threads", "processes"):
        assert f'<th title="sort by {header}">{header}</th>' in page
    # a row sorts by its figures, not by their text (RSS by bytes)
    assert ('<tr><td data-v="1">1</td><td data-v="c1">c1</td><td data-v="1">1</td><td data-v="0.0">0.0</td>'
            '<td data-v="2.65">2.6</td><td data-v="0.0">0.00</td><td data-v="4">4</td><td data-v="0.0">0</td>'
            '<td data-v="1.0">100</td><td data-v="last-read">last-read</td>'
            f'<td data-v="{200 << 20}">200</td><td data-v="3">3</td><td data-v="1">1</td></tr>') in page
    assert "<li>c1: container start-up, from the step&#x27;s start to its first rank&#x27;s program, 0.4 s</li>" in page
    assert "<li>rank 2 (c1) ended at 1.3 s, 1.9 s before the step&#x27;s end</li>" in page
    assert "rank 0 (c1) ended" not in page and "rank 1 (c1) ended" not in page


def test_report_json_has_each_ranks_exact_total_and_the_nodes_start_up() -> None:
    data = report_json(cpu_only_step())
    assert data["ranks"][1] == {  # type: ignore[index]
        "rank": 1, "node": "c1", "local_rank": 1, "cpu_util": 0.0, "cpu_cores": 0.0, "cores": 4, "idle_fraction": 1.0,
        "cpu_s": 0.0, "cpu_source": "last-read", "started_s": 0.45, "ended_s": 3.1, "life_s": 2.65,
        "rss_bytes": 200 << 20, "threads": 3, "procs": 1, "intervals": 8, "cgroup_cpu_s": None,
        "cgroup_peak_bytes": None}
    assert data["nodes"][0]["startup_s"] == 0.4 and data["nodes"][0]["gpu_sampling"] == ""  # type: ignore[index]
    json.dumps(data)


def test_the_summary_names_a_slow_container_start_up() -> None:
    assert "start-up" not in summary_text(cpu_only_step())  # 0.4 s: not worth a word
    text = summary_text(cpu_only_step(duration=30.0, startup=3.2))
    assert "  c1 ranks 0-2: CPU 3.5 0.0 1.0 cores busy of 4 (88 0 25 %); RSS peak 300 200 100 MiB; processes 1 1 2; " \
           "start-up 3.2 s\n" in text
