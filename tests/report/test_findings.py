"""The report's rules, on the recorded streams (tests/fixtures/report/) and on small made-up steps: each names the
problem and the fix, and says whether it applied."""

from __future__ import annotations

from envbuild.report.collect import Collector
from envbuild.report.reportmodel import Report
from envbuild.report.stepfindings import numbers
from tests.report.test_collect import feed_records, replay

GIB = 1024**3


def step(*, gpus: list[float], ranks: list[tuple[float, int, int]], cpus: int = 28, mem_used: int = 10 * GIB,
         exit_code: int = 0) -> Report:
    """One node, 5 samples 5 s apart: GPUs at the given utilisations, ranks as (busy cores, procs, cores)."""
    collector = Collector(["python", "train.py"], {})
    names = [{"index": i, "name": "GPU", "mem_total": 64 * GIB} for i in range(len(gpus))]
    records: list[dict[str, object]] = [{"v": 1, "kind": "start", "node": "n1", "seq": 0, "t": 0.0, "interval": 5.0,
                                         "cpus": cpus, "gpu_source": "amd-smi" if gpus else None, "gpu_note": "",
                                         "gpu_names": names}]
    for seq in range(1, 6):
        t = 5.0 * seq
        records.append({"v": 1, "kind": "sample", "node": "n1", "seq": seq, "t": t, "load1": 1.0,
                        "ranks": [{"rank": r, "local_rank": r, "pid": 100 + r, "procs": procs, "threads": 4,
                                   "cpu_s": busy * t, "rss": GIB, "cores": cores}
                                  for r, (busy, procs, cores) in enumerate(ranks)],
                        "gpus": [{"index": i, "util": util, "mem_used": mem_used, "mem_total": 64 * GIB}
                                 for i, util in enumerate(gpus)]})
    feed_records(collector, records)
    return collector.build(exit_code, 0.0, 26.0)


def rules(report: Report) -> list[str]:
    return [finding.rule for finding in report.findings]


def test_only_gpu_0_busy_of_eight() -> None:
    report = replay("eight-gpus-one-busy.stream")
    assert rules(report) == ["one-gpu-busy"]  # the node's low mean is the idle GPUs, not the input pipeline
    finding = report.findings[0]
    assert finding.level == "problem"
    assert finding.what == "node g1: GPU 0 busy 98 %, GPUs 1-7 idle: only one process uses a GPU"
    assert "the 8 ranks on this node all compute on one GPU" in finding.fix
    assert "torch.cuda.set_device(int(os.environ['LOCAL_RANK']))" in finding.fix


def test_one_process_for_four_gpus_is_told_to_start_one_per_gpu() -> None:
    report = step(gpus=[0.9, 0.0, 0.0, 0.0], ranks=[(1.5, 3, 7)])
    assert rules(report) == ["one-gpu-busy"]
    assert report.findings[0].what == "node n1: GPU 0 busy 90 %, GPUs 1-3 idle: only one process uses a GPU"
    assert "torchrun --nproc-per-node=4" in report.findings[0].fix


def test_some_gpus_idle_while_others_busy() -> None:
    report = step(gpus=[0.9, 0.8, 0.0, 0.01], ranks=[(1.5, 3, 7), (1.5, 3, 7)])
    assert rules(report) == ["idle-gpus"]
    assert report.findings[0].what == "node n1: GPUs 2, 3 idle while GPUs 0, 1 are busy (mean 85 %)"
    assert report.findings[0].fix.startswith("2 ranks on this node use 2 of its 4 GPUs")


def test_all_gpus_idle() -> None:
    report = step(gpus=[0.0, 0.0], ranks=[(1.0, 1, 7), (1.0, 1, 7)])
    assert rules(report) == ["idle-gpus"]
    assert report.findings[0].what == "node n1: all 2 GPUs idle (mean utilisation under 5 %)"


def test_rank_1_sleeps() -> None:
    report = replay("two-ranks-one-sleeps.stream")
    assert rules(report) == ["idle-rank"]
    assert report.findings[0].what == "rank 1 idle 100 % of the step while rank 0 computed"
    assert report.checked == ["idle-rank", "failed-step"]  # no GPU measured: the GPU rules did not apply


def test_a_rank_waiting_on_its_busy_gpu_is_not_idle() -> None:
    report = step(gpus=[0.9, 0.9], ranks=[(1.0, 1, 7), (0.0, 1, 7)])
    assert "idle-rank" not in rules(report)


def test_input_bound_without_dataloader_workers() -> None:
    report = replay("input-bound.stream")
    assert rules(report) == ["input-bound"]
    finding = report.findings[0]
    assert finding.what == ("node nid005: GPUs wait on the input pipeline: GPU 35 %, ranks 0-7 busy one core in one "
                            "process (DataLoader num_workers=0)")
    assert "num_workers=6" in finding.fix and "7 cores per GPU" in finding.fix


def test_input_bound_with_every_core_busy() -> None:
    report = step(gpus=[0.3, 0.3], ranks=[(7.0, 5, 7), (7.0, 5, 7)], cpus=14)
    assert rules(report) == ["input-bound"]
    assert report.findings[0].what == "node n1: GPUs wait on the CPUs: GPU 30 %, all 7 cores of ranks 0, 1 busy"
    assert "(the step has 7 per GPU on this node)" in report.findings[0].fix


def test_gpu_memory_near_full_is_a_note() -> None:
    report = replay("two-nodes.stream")
    assert rules(report) == ["gpu-memory"]
    assert report.findings[0].level == "note"
    assert report.findings[0].what == "node nid002: GPU memory 97 % at its peak (GPU 3)"


def test_a_failed_step_is_reported_and_says_so() -> None:
    report = step(gpus=[0.9], ranks=[(1.0, 3, 7)], exit_code=137)
    assert rules(report) == ["failed-step"]
    assert report.findings[0].what == "the step ended with exit code 137: the figures cover it until then"


def test_problems_come_before_notes() -> None:
    report = step(gpus=[0.9, 0.0], ranks=[(1.0, 1, 7)], mem_used=63 * GIB, exit_code=1)
    assert [(f.level, f.rule) for f in report.findings] == [
        ("problem", "one-gpu-busy"), ("note", "gpu-memory"), ("note", "failed-step")]


def test_a_clean_step_lists_the_rules_it_checked() -> None:
    report = step(gpus=[0.9, 0.85], ranks=[(1.5, 3, 7), (1.4, 3, 7)])
    assert report.findings == []
    assert report.checked == ["one-gpu-busy", "idle-gpus", "idle-rank", "input-bound", "gpu-memory", "failed-step"]


def test_numbers() -> None:
    assert numbers([5, 1, 2, 3, 7, 8]) == "1-3, 5, 7, 8"
    assert numbers([]) == ""


def ranks_with_life(shapes: dict[int, list[float]], *, start: float = 0.5, every: float = 0.5) -> Report:
    """One node; each rank's program starts at `start` and its cumulative CPU seconds are read every `every`
    seconds (the list), then it ends at its last read with that total (the sampler's exit read)."""
    collector = Collector(["python", "train.py"], {})
    records: list[dict[str, object]] = [{"v": 1, "kind": "start", "node": "n1", "seq": 0, "t": 0.0, "interval": 5.0,
                                         "cpus": 4, "gpu_source": None, "gpu_note": "no GPU", "gpu_names": []}]
    count = max(len(totals) for totals in shapes.values())
    for seq in range(1, count + 1):
        t = start + every * seq
        ranks = []
        for rank, totals in shapes.items():
            ended = start + every * len(totals) if seq >= len(totals) else None
            ranks.append({"rank": rank, "local_rank": rank, "pid": 100 + rank, "procs": 1, "threads": 1, "cores": 1,
                          "cpu_s": totals[min(seq, len(totals)) - 1], "rss": GIB, "started": start, "ended": ended,
                          "cpu_source": "exit" if ended is not None else "running"})
        records.append({"v": 1, "kind": "sample", "node": "n1", "seq": seq, "t": t, "load1": 1.0, "ranks": ranks})
    feed_records(collector, records)
    return collector.build(0, 0.0, start + every * count + 0.1)


def test_a_rank_idle_after_its_imports_is_named_from_its_exact_total() -> None:
    """Rank 1 imports for a second (0.4 of a core) and then waits: idle in 80 % of its life, 0.08 cores on the mean."""
    busy = [0.5 * (i + 1) for i in range(10)]
    idle = [0.2, 0.4] + [0.4 + 0.001 * i for i in range(8)]
    report = ranks_with_life({0: busy, 1: idle})
    rank0, rank1 = report.ranks
    assert rank0.cpu_cores == 1.0 and rank1.cpu_s == 0.41 and rank1.life_s == 5.0
    assert rank1.idle_fraction is not None and 0.75 <= rank1.idle_fraction < 0.9
    assert report.findings[0].what == "rank 1 idle 80 % of the step while rank 0 computed"


def test_a_rank_that_computes_in_bursts_between_samples_is_not_idle() -> None:
    """Idle at most reads, but its exact total is a third of the busy rank's: not idle."""
    bursty = [0.0, 0.0, 0.0, 1.6, 1.6, 1.6, 1.6, 1.6, 1.6, 1.7]
    report = ranks_with_life({0: [0.5 * (i + 1) for i in range(10)], 1: bursty})
    assert report.ranks[1].idle_fraction is not None and report.ranks[1].idle_fraction >= 0.75
    assert "idle-rank" not in rules(report) and "idle-rank" in report.checked


def test_ranks_too_short_to_judge_say_so() -> None:
    report = ranks_with_life({0: [0.2, 0.4], 1: [0.0, 0.0]}, every=0.3)
    assert [(f.rule, f.level) for f in report.findings] == [("idle-rank", "note")]
    assert report.findings[0].what.startswith("the ranks ran 0.6 s at most: too short to tell an idle rank")


def test_a_slow_start_is_a_note_of_its_own_not_idle_time() -> None:
    """The ranks' programs start 40 s into a 100 s step: a slow-start note; the ranks, busy from their start,
    are not idle."""
    report = ranks_with_life({0: [0.5 * (i + 1) for i in range(120)], 1: [0.5 * (i + 1) for i in range(120)]},
                             start=40.0)
    assert report.nodes[0].startup_s == 40.0
    assert [(f.rule, f.level) for f in report.findings] == [("slow-start", "note")]
    assert report.findings[0].what == "node n1: the ranks' programs started up to 40 s after the step (40 % of it)"
    quick = ranks_with_life({0: [0.5 * (i + 1) for i in range(10)]}, start=0.5)
    assert "slow-start" in quick.checked and not quick.findings
