"""The scaling table's arithmetic (pure): the JSC course's Lightning job at 4, 8, 16 and 32 nodes, throughput
against time, failed points and the spread of repeated runs."""

from __future__ import annotations

import pytest

from envbuild.slurm.sweep.points import ScalePoint, plan_points
from envbuild.slurm.sweep.table import Run, build_table, format_seconds, render_text, spread_percent

JSC_POINTS = plan_points("nodes", [4, 8, 16, 32], per_node_capacity=4)
JSC_TIMES = {4: 24 * 60 + 48, 8: 13 * 60 + 10, 16: 6 * 60 + 56, 32: 4 * 60 + 48}  # 24m48s, 13m10s, 6m56s, 4m48s


def ok(seconds: float, repeat: int = 0, throughput: float | None = None) -> Run:
    return Run(repeat=repeat, job_id=str(100 + repeat), log=f"r{repeat}.out", state="COMPLETED", exit_code=0,
               time_s=seconds, throughput=throughput, unit="samples/s" if throughput is not None else None)


def test_the_jsc_table_speed_up_and_efficiency_from_wall_times() -> None:
    rows = build_table(JSC_POINTS, {p.key: [ok(JSC_TIMES[p.nodes])] for p in JSC_POINTS})
    assert [round(r.speedup, 2) for r in rows] == [1.0, 1.88, 3.58, 5.17]
    assert [round(r.efficiency, 2) for r in rows] == [1.0, 0.94, 0.89, 0.65]
    assert [format_seconds(r.time_s) for r in rows] == ["24m48s", "13m10s", "6m56s", "4m48s"]
    text = render_text(rows)
    assert text.splitlines()[0].split() == ["nodes", "workers", "runs", "median", "time", "throughput", "speed-up",
                                            "efficiency", "GPU", "util", "spread", "status"]
    assert text.splitlines()[4].split() == ["32", "128", "GPUs", "1", "4m48s", "-", "5.17x", "65%", "-", "-", "ok"]


def test_throughput_is_used_when_every_point_has_it() -> None:
    points = plan_points("gpus", [1, 2], per_node_capacity=4)
    rows = build_table(points, {"1n1g": [ok(10.0, throughput=100.0)], "1n2g": [ok(9.0, throughput=150.0)]})
    assert rows[1].speedup == pytest.approx(1.5) and rows[1].efficiency == pytest.approx(0.75)
    assert rows[1].throughput == 150.0 and rows[1].unit == "samples/s"


def test_a_point_without_throughput_makes_the_table_compare_times() -> None:
    points = plan_points("gpus", [1, 2], per_node_capacity=4)
    rows = build_table(points, {"1n1g": [ok(10.0, throughput=100.0)], "1n2g": [ok(8.0)]})
    assert rows[1].speedup == pytest.approx(1.25)


def test_median_and_spread_of_repeats() -> None:
    points = [ScalePoint(1, 1)]
    rows = build_table(points, {"1n1g": [ok(10.0, 0), ok(12.0, 1), ok(11.0, 2)]})
    assert rows[0].time_s == 11.0 and rows[0].runs == 3
    assert rows[0].spread_pct == pytest.approx(2 / 11 * 100)
    assert spread_percent([5.0]) is None


def test_a_failed_point_is_shown_and_the_baseline_is_the_smallest_finished_one() -> None:
    points = plan_points("gpus", [1, 2, 4], per_node_capacity=4)
    failed = Run(repeat=0, job_id="77", log="/r/jobs/1n1g-r1-77.out", state="FAILED", exit_code=1)
    rows = build_table(points, {"1n1g": [failed], "1n2g": [ok(10.0)], "1n4g": [ok(6.0)]})
    assert rows[0].status == "failed" and rows[0].speedup is None
    assert rows[1].speedup == 1.0 and rows[2].speedup == pytest.approx(10 / 6)
    assert rows[2].efficiency == pytest.approx(10 / 6 / 2)
    text = render_text(rows)
    assert "failed: 1 node x 1 GPU, run 1: job 77 FAILED, exit code 1; log /r/jobs/1n1g-r1-77.out" in text


def test_gpu_util_is_the_mean_of_the_finished_runs_that_measured_it() -> None:
    points = plan_points("gpus", [1, 2], per_node_capacity=4)
    failed = Run(repeat=2, job_id="9", log="x", state="FAILED", exit_code=1, gpu_util=0.1)
    unmeasured = Run(repeat=1, job_id="8", log="x", state="COMPLETED", exit_code=0, time_s=9.0)
    runs = {"1n1g": [Run(0, "7", "x", "COMPLETED", 0, 10.0, gpu_util=0.9), unmeasured, failed], "1n2g": [ok(8.0)]}
    rows = build_table(points, runs)
    assert rows[0].gpu_util == pytest.approx(0.9) and rows[1].gpu_util is None
    assert [line.split()[8] for line in render_text(rows).splitlines()[1:3]] == ["90%", "-"]


def test_a_completed_job_without_a_time_is_not_a_result() -> None:
    run = Run(repeat=0, job_id="5", log="x", state="COMPLETED", exit_code=0, time_s=None)
    assert not run.ok
    assert build_table([ScalePoint(1, 1)], {"1n1g": [run]})[0].status == "failed"


@pytest.mark.parametrize(("seconds", "text"), [(None, "-"), (6.94, "6.9s"), (59.96, "60.0s"), (60, "1m00s"),
                                               (3725, "1h02m")])
def test_format_seconds(seconds: float | None, text: str) -> None:
    assert format_seconds(seconds) == text
