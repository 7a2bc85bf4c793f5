"""The training script's throughput line, `envrun-metric: KEY=NUMBER ...`: its prefix and its words. Pure.

One home for both readers: a sweep reads the last line of a job's output (envbuild.slurm.sweep.metrics), the
job report the last line the step printed on stderr (envbuild.report.collect). It lives here, at the bottom,
because envrun's step supervisor loads the report after every step and must not load the sweep's modules.
Light: no imports.
"""

from __future__ import annotations

METRIC_PREFIX = "envrun-metric:"


def parse_pairs(text: str) -> dict[str, float]:
    """'samples_per_s=12.5 train_s=3' -> {...}; words that are not KEY=NUMBER are skipped."""
    found: dict[str, float] = {}
    for word in text.split():
        key, eq, value = word.partition("=")
        if not eq or not key.replace("_", "").isalnum():
            continue
        try:
            number = float(value)
        except ValueError:
            continue
        if number == number and abs(number) != float("inf"):  # no NaN or infinity in the table
            found[key] = number
    return found


def metric_pairs(line: str) -> dict[str, float]:
    """The KEY=NUMBER words after METRIC_PREFIX anywhere in `line` (srun --label or a launcher may put a prefix
    such as "0: " or "[default0]:" before it); {} when the line has none."""
    at = line.find(METRIC_PREFIX)
    return parse_pairs(line[at + len(METRIC_PREFIX):]) if at >= 0 else {}
