"""The summary a person reads after a step, and the files of --report DIR: report.json (valid, schema
envrun-report/1), report.html (self-contained, the PNG inside), timeline.png and summary.txt."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from envbuild.report import render
from envbuild.report.render import report_json, summary_text, write_report
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
    assert "  not measured: use on n1: 1 sample in 2.0 s" in short


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
                         "threads", "procs", "intervals"}
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
