"""The collector: sampler records (recorded streams in tests/fixtures/report/, made by make_streams.py there) in,
the step's model out; split samples merged, garbage counted and skipped, memory bounded on long steps."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from envbuild.report import collect
from envbuild.report.collect import Collector
from envbuild.report.reportmodel import Report
from envbuild.report.reportrender import summary_text
from envbuild.report.wire import StreamSplitter, encode

STREAMS = Path(__file__).resolve().parents[1] / "fixtures" / "report"
JOB = {"id": "4242", "name": "train"}
KEY = "0123456789abcdef" * 2


def replay(name: str, *, exit_code: int | None = None, duration: float = 60.0) -> Report:
    """Feed a recorded stream as envrun's supervisor does: the records of the stream's key to feed, metric lines
    of the rest to metric. Lines end at "\\n" only: str.splitlines would also split at the marker's own 0x1e."""
    first, body = (STREAMS / name).read_bytes().split(b"\n", 1)
    head = dict(word.split("=") for word in first.decode().lstrip("# ").split())
    collector = Collector(["python", "train.py"], JOB)
    splitter = StreamSplitter(head["key"])
    rest, payloads = splitter.feed(body)
    for payload in payloads:
        collector.feed(payload)
    for line in (rest + splitter.flush()).decode().split("\n"):
        if "envrun-metric:" in line:
            collector.metric(line)
    started = float(head["started"])
    return collector.build(int(head["exit"]) if exit_code is None else exit_code, started, started + duration)


def feed_records(collector: Collector, records: list[dict[str, object]]) -> None:
    splitter = StreamSplitter(KEY)
    for record in records:
        for line in encode(record, KEY):
            passed, payloads = splitter.feed(line)
            assert passed == b""
            for payload in payloads:
                collector.feed(payload)


def test_two_ranks_cpu_use_and_idle_share() -> None:
    report = replay("two-ranks-one-sleeps.stream")
    assert [(r.rank, r.node, r.local_rank, r.cores, r.intervals) for r in report.ranks] == [
        (0, "n1", 0, 2, 7), (1, "n1", 1, 2, 7)]
    busy, sleeper = report.ranks
    assert busy.cpu_cores == pytest.approx(0.98, abs=0.01)
    assert busy.cpu_util == pytest.approx(0.49, abs=0.01)
    assert busy.idle_fraction == 0.0
    assert sleeper.idle_fraction == 1.0
    assert report.metrics == {"samples_per_s": 812.5, "train_s": 15.9}
    assert report.nodes[0].cpus == 2 and report.nodes[0].gpu_source is None
    assert report.gpus == []
    assert any(item.startswith("GPUs on n1: no nvidia-smi") for item in report.not_measured)


def test_gpus_mean_peak_and_busy_share() -> None:
    report = replay("eight-gpus-one-busy.stream")
    first, second = report.gpus[0], report.gpus[1]
    assert (first.node, first.index, first.name, first.samples) == ("g1", 0, "NVIDIA A100-SXM4-80GB", 12)
    assert first.util == pytest.approx((9 * 0.97 + 3 * 0.99) / 12)
    assert first.util_max == 0.99 and first.busy_fraction == 1.0
    assert first.mem_fraction == pytest.approx(0.9)
    assert second.util == 0.0 and second.busy_fraction == 0.0
    assert len(report.gpus) == 8 and len(report.ranks) == 8
    assert report.interval == 5.0
    assert report.launchers["g1"]["procs"] == 3


def test_two_nodes_interleaved() -> None:
    report = replay("two-nodes.stream")
    assert [n.node for n in report.nodes] == ["nid001", "nid002"]
    assert [(r.rank, r.node) for r in report.ranks] == [(r, "nid001") for r in range(4)] + [(r, "nid002") for r in range(4, 8)]
    assert all(r.procs == 3 and r.threads == 30 for r in report.ranks)
    assert [len(line.t) for line in report.timeline] == [10, 10]
    assert report.metrics["samples_per_s"] == 9000  # behind a launcher's "[default0]:" prefix


def test_split_samples_merged_and_garbage_skipped() -> None:
    report = replay("split-and-garbage.stream")
    assert len(report.ranks) == 48
    assert all(rank.intervals == 3 for rank in report.ranks)  # 4 samples, each split over several lines
    assert report.nodes[0].samples == 4
    assert report.rejected == 3  # cut short, another schema, no node
    assert report.metrics == {}  # "samples_per_s=abc" is no number
    assert "3 record lines could not be read (cut short or not a record): those samples are missing" in report.not_measured


def test_a_step_too_short_for_two_samples_says_so() -> None:
    report = replay("too-short.stream")
    assert report.exit_code == 1
    assert report.ranks[0].cpu_cores is None and report.ranks[0].idle_fraction is None
    # a sampler without the ranks' start times (an older envbuild on the nodes): one sample carries no figure
    assert "CPU use of rank 0 on n1: seen in one sample only, with no start time" in report.not_measured


def test_no_records_at_all() -> None:
    report = Collector(["python", "x.py"], {}).build(0, 100.0, 101.0)
    assert report.nodes == [] and report.ranks == []
    assert report.not_measured[0].startswith("everything: no sampler record reached envrun")


def test_a_restarted_rank_starts_its_count_again() -> None:
    collector = Collector(["x"], {})
    base = {"v": 1, "kind": "sample", "node": "n1", "gpus": [], "load1": 0.1}

    def rank(pid: int, cpu_s: float) -> dict[str, object]:
        return {"rank": 0, "local_rank": 0, "pid": pid, "procs": 1, "threads": 1, "cpu_s": cpu_s, "rss": 1, "cores": 1}

    feed_records(collector, [{**base, "seq": 1, "t": 10.0, "ranks": [rank(1, 50.0)]},
                             {**base, "seq": 2, "t": 20.0, "ranks": [rank(1, 60.0)]},
                             {**base, "seq": 3, "t": 30.0, "ranks": [rank(2, 1.0)]},  # a new process: no interval
                             {**base, "seq": 4, "t": 40.0, "ranks": [rank(2, 1.0)]}])
    report = collector.build(0, 0.0, 40.0)
    assert report.ranks[0].intervals == 2
    assert report.ranks[0].cpu_cores == pytest.approx(0.5)
    assert report.ranks[0].idle_fraction == pytest.approx(0.5)


def test_the_last_metric_line_counts() -> None:
    collector = Collector(["x"], {})
    collector.metric("envrun-metric: samples_per_s=1")
    collector.metric("0: envrun-metric: tokens_per_s=2.5 train_s=3")
    collector.metric("envrun-metric: nothing here")
    assert collector.build(0, 0.0, 1.0).metrics == {"tokens_per_s": 2.5, "train_s": 3.0}


def test_a_long_step_keeps_a_bounded_timeline_quickly() -> None:
    """100k samples (days of a step at a few seconds each): the timeline stays at most MAX_POINTS points and the
    means are those of every sample."""
    collector = Collector(["x"], {})
    feed_records(collector, [{"v": 1, "kind": "start", "node": "n1", "seq": 0, "t": 0.0, "interval": 2.0, "cpus": 4,
                              "gpu_source": "nvml", "gpu_note": "", "gpu_names": [{"index": 0, "name": "G", "mem_total": 100}]}])
    began = time.monotonic()
    for seq in range(1, 100_001):
        t = 2.0 * seq
        util = 0.25 if seq % 2 else 0.75
        collector.feed(f'{{"v":1,"kind":"sample","node":"n1","seq":{seq},"t":{t},"ranks":[{{"rank":0,"local_rank":0,'
                       f'"pid":9,"procs":1,"threads":4,"cpu_s":{0.5 * t},"rss":1000,"cores":4}}],'
                       f'"gpus":[{{"index":0,"util":{util},"mem_used":50,"mem_total":100}}],"load1":1.0}}')
        timeline = collector._nodes["n1"].timeline
        assert len(timeline.t) <= collect.MAX_POINTS
    elapsed = time.monotonic() - began
    report = collector.build(0, 0.0, 200_002.0)
    line = report.timeline[0]
    assert len(line.t) <= collect.MAX_POINTS + 1 and line.stride >= 100_000 // collect.MAX_POINTS
    # every point but the last (the bucket in progress) averages as many odd samples as even ones
    assert all(value == pytest.approx(0.5) for value in line.series["GPU 0"][:-1])
    assert all(value == pytest.approx(0.5) for value in line.series["rank 0"])
    assert line.t == sorted(line.t)
    assert report.gpus[0].util == pytest.approx(0.5)
    assert report.ranks[0].cpu_cores == pytest.approx(0.5)
    assert elapsed < 30, f"100k samples took {elapsed:.1f} s"


def test_text_from_the_records_cannot_steer_the_terminal_or_add_lines() -> None:
    """Node and GPU names, the GPU tool's note and the end's reason are shown escaped: a name with ESC [ 2 J, a
    newline that would start a fake summary line, a bidirectional override and a C1 CSI."""
    node = "gpu-1\x1b[2J\nenvrun report: all fine\u202e"
    gpu_name = "A100\x1b]0;owned\x07\x9b31m"
    collector = Collector(["python", "train.py"], JOB)
    start = {"v": 1, "kind": "start", "node": node, "seq": 0, "t": 10.0, "interval": 1.0, "cpus": 4,
             "gpu_source": "nvidia-smi\r", "gpu_note": "slow\x1b[5m", "gpu_names": [{"index": 0, "name": gpu_name}]}
    samples: list[dict[str, object]] = [{"v": 1, "kind": "end" if seq == 3 else "sample", "node": node, "seq": seq, "t": 10.0 + seq,
                "ranks": [{"rank": 0, "local_rank": 0, "pid": 5, "cpu_s": 0.5 * seq, "cores": 1}],
                "gpus": [{"index": 0, "util": 0.9, "mem_used": 1, "mem_total": 2}], "reason": "x\x1bc"}
               for seq in (1, 2, 3)]
    feed_records(collector, [start, *samples])
    report = collector.build(0, 10.0, 14.0)
    (summary_node,) = report.nodes
    assert summary_node.node == "gpu-1\\x1b[2J\\nenvrun report: all fine\\u202e"
    assert report.gpus[0].name == "A100\\x1b]0;owned\\x07\\x9b31m" and report.gpus[0].node == summary_node.node
    assert (summary_node.gpu_source, summary_node.gpu_note) == ("nvidia-smi\\r", "slow\\x1b[5m")
    assert report.ranks[0].node == summary_node.node and report.timeline[0].node == summary_node.node
    text = summary_text(report)
    assert all(line.isprintable() for line in text.split("\n")), text
    assert [line for line in text.split("\n") if line.startswith("envrun report:")] == [text.split("\n")[0]], text
