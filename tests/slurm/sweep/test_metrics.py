"""The metric line and the step line in a job's output (pure)."""

from __future__ import annotations

from envbuild.slurm.sweep.metrics import parse_output, parse_pairs

OUTPUT = """\
rank 0/2 local 0 on vm: loss 7.6 -> 0.03
envrun-metric: samples_per_s=10.0
0: envrun-metric: samples_per_s=8016.5 train_s=2.395 samples=19200 note=fast
envrun-step: wall_ms=14043 exit=0
"""


def test_the_last_metric_line_counts_and_a_prefix_before_it_is_allowed() -> None:
    seen = parse_output(OUTPUT)
    assert seen.metrics == {"samples_per_s": 8016.5, "train_s": 2.395, "samples": 19200.0}
    assert seen.throughput == (8016.5, "samples/s")
    assert (seen.step_s, seen.step_exit) == (14.043, 0)


def test_tokens_win_over_samples() -> None:
    seen = parse_output("envrun-metric: samples_per_s=4 tokens_per_s=4096\n")
    assert seen.throughput == (4096.0, "tokens/s")


def test_no_lines_no_numbers() -> None:
    seen = parse_output("Traceback (most recent call last):\nRuntimeError: loss is nan\n")
    assert seen.throughput is None and seen.step_s is None and seen.metrics == {}


def test_words_that_are_not_numbers_are_skipped() -> None:
    assert parse_pairs("a=1 b=nan c=inf d=x e= =3 f-g=2 h=1e3") == {"a": 1.0, "h": 1000.0}
