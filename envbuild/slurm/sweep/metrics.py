"""What a sweep reads from a job's output: the training script's metric line and the step's wall time. Pure.

The metric line (printed once by rank 0, after training; the last one in the output counts):

    envrun-metric: samples_per_s=1234.5 train_s=12.3

Words after the prefix are KEY=NUMBER. `samples_per_s` or `tokens_per_s` is the throughput (if both are
there, tokens win); `train_s` is the training loop's own time. Other keys are kept in the JSON as they are.
Any language can print it; the examples do (examples/ddp_minimal.py and the others). The line's grammar lives in
envbuild.report.metricline, shared with the job report.

The step line is written by the job script itself (envbuild.slurm.batch.script.timed_step):

    envrun-step: wall_ms=23456 exit=0
"""

from __future__ import annotations

from dataclasses import dataclass, field

from envbuild.report.metricline import METRIC_PREFIX, parse_pairs

STEP_PREFIX = "envrun-step:"
THROUGHPUT_KEYS = (("tokens_per_s", "tokens/s"), ("samples_per_s", "samples/s"))

@dataclass
class RunOutput:
    """What one job's output says: the step's wall time and exit status, the metric line's values."""

    step_s: float | None = None
    step_exit: int | None = None
    metrics: dict[str, float] = field(default_factory=dict)

    @property
    def throughput(self) -> tuple[float, str] | None:
        """(value, unit) from the metric line, or None."""
        for key, unit in THROUGHPUT_KEYS:
            if key in self.metrics:
                return self.metrics[key], unit
        return None


def parse_output(text: str) -> RunOutput:
    """The last metric line and the last step line of a job's output (a requeued run prints them again)."""
    out = RunOutput()
    for raw in text.splitlines():
        line = raw.strip()
        # srun --label or a launcher may put a prefix before it ("0: ", "[default0]:")
        at = line.find(METRIC_PREFIX)
        if at >= 0:
            pairs = parse_pairs(line[at + len(METRIC_PREFIX):])
            if pairs:
                out.metrics = pairs
            continue
        if line.startswith(STEP_PREFIX):
            pairs = parse_pairs(line[len(STEP_PREFIX):])
            if "wall_ms" in pairs:
                out.step_s = pairs["wall_ms"] / 1000.0
            if "exit" in pairs:
                out.step_exit = int(pairs["exit"])
    return out


def mean_gpu_util(report: object) -> float | None:
    """The mean of `gpus[].util` (0-1) in a job report's report.json (envbuild.report), over the GPUs it
    measured; None when it measured none or is not a report (the table then shows "-")."""
    gpus = report.get("gpus") if isinstance(report, dict) else None
    values = [float(gpu["util"]) for gpu in gpus or [] if isinstance(gpu, dict)
              and isinstance(gpu.get("util"), (int, float)) and not isinstance(gpu.get("util"), bool)]
    return sum(values) / len(values) if values else None
