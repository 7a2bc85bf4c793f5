"""The job report of one step as data: what the collector (envbuild.report.collect) made of the nodes' records,
what the findings (envbuild.report.stepfindings) judge, and what the renderer (envbuild.report.reportrender) writes.

Plain classes with their fields set in __init__: envrun loads this after every step, so no dataclasses or
typing (both cost start-up time that envrun's light path keeps out). Fractions are 0-1, sizes bytes, times
unix seconds; None where a value was not measured (the report says why in `not_measured`).
"""

from __future__ import annotations

# What "idle" means, for the collector that counts it and the findings that judge it (sources and reasons:
# docs/concepts/report.md). A GPU sample under GPU_IDLE_UTIL is idle: NVML's utilisation is the share of the
# sample period in which a kernel ran, so a few percent is the driver's and the framework's own housekeeping.
# A rank's sample interval is idle when its processes used less than RANK_IDLE_CORES of one core.
GPU_IDLE_UTIL = 0.05
RANK_IDLE_CORES = 0.05


class NodeSummary:
    """One node: what its sampler said at start, and its mean load."""

    def __init__(self, *, node: str, cpus: int | None, gpu_source: str | None, gpu_note: str, load1_mean: float | None,
                 samples: int, first: float | None, last: float | None, startup_s: float | None = None,
                 gpu_sampling: str = "") -> None:
        self.node = node
        self.startup_s = startup_s  # from the step's start to the first rank's program on this node (container start)
        self.gpu_sampling = gpu_sampling  # what one GPU reading covers, as the GPU source says
        self.cpus = cpus
        self.gpu_source = gpu_source
        self.gpu_note = gpu_note
        self.load1_mean = load1_mean
        self.samples = samples
        self.first = first  # time of its first and last sample (None: none came)
        self.last = last


class RankSummary:
    """One rank (a training process and its children): its CPU seconds over its life, from the kernel's counts
    (envbuild.report.procs), and their shape from the samples."""

    def __init__(self, *, rank: int, node: str, local_rank: int | None, cores: int | None, cpu_cores: float | None,
                 idle_fraction: float | None, rss_bytes: int, threads: int, procs: int, intervals: int,
                 cpu_s: float | None = None, cpu_source: str = "", started_s: float | None = None,
                 ended_s: float | None = None, cgroup_cpu_s: float | None = None,
                 cgroup_peak_bytes: int | None = None) -> None:
        # Its Slurm task cgroup's own counts, where the rank has a task cgroup of its own (srun's tasks under
        # Slurm's task/cgroup plugin): CPU seconds and peak memory of everything in the task, its launcher too
        self.cgroup_cpu_s = cgroup_cpu_s
        self.cgroup_peak_bytes = cgroup_peak_bytes
        self.cpu_s = cpu_s  # CPU seconds (user + system) of its processes from its program's start to its end
        self.cpu_source = cpu_source  # where that total comes from: exit, last-read or running (procs.py)
        self.started_s = started_s  # when its program started and ended, seconds after the step's start
        self.ended_s = ended_s  # (None: it was running when the step's records ended)
        self.rank = rank
        self.node = node
        self.local_rank = local_rank
        self.cores = cores  # CPUs its main process may run on
        self.cpu_cores = cpu_cores  # mean busy cores: cpu_s over its life (CPU seconds per second)
        self.idle_fraction = idle_fraction  # share of its life in sample intervals under RANK_IDLE_CORES
        self.rss_bytes = rss_bytes  # peaks
        self.threads = threads
        self.procs = procs
        self.intervals = intervals  # sample intervals its CPU use was measured over

    @property
    def life_s(self) -> float | None:
        """Seconds its program ran (to the step's last record when it had not ended)."""
        if self.started_s is None or self.ended_s is None:
            return None
        return max(0.0, self.ended_s - self.started_s)

    @property
    def cpu_util(self) -> float | None:
        """Mean busy cores / cores it may use (0-1)."""
        if self.cpu_cores is None or not self.cores:
            return None
        return min(1.0, self.cpu_cores / self.cores)


class GpuSummary:
    """One GPU of the job on one node."""

    def __init__(self, *, node: str, index: int, name: str, util: float | None, util_max: float | None,
                 busy_fraction: float | None, mem_used_bytes: int | None, mem_total_bytes: int | None, samples: int) -> None:
        self.node = node
        self.index = index
        self.name = name
        self.util = util  # mean of the tool's utilisation over the samples that had one
        self.util_max = util_max
        self.busy_fraction = busy_fraction  # share of those samples at or above GPU_IDLE_UTIL
        self.mem_used_bytes = mem_used_bytes  # peak
        self.mem_total_bytes = mem_total_bytes
        self.samples = samples  # samples with a utilisation value

    @property
    def mem_fraction(self) -> float | None:
        if self.mem_used_bytes is None or not self.mem_total_bytes:
            return None
        return self.mem_used_bytes / self.mem_total_bytes


class Finding:
    """What a rule found: `what` names the problem and where, `fix` what to change. level: "problem" or "note"."""

    def __init__(self, *, level: str, what: str, fix: str, rule: str) -> None:
        self.level = level
        self.what = what
        self.fix = fix
        self.rule = rule

    def as_dict(self) -> dict[str, str]:
        return {"level": self.level, "what": self.what, "fix": self.fix, "rule": self.rule}


class NodeTimeline:
    """A node's downsampled timeline: seconds since the step started, and per series ("rank 0", "GPU 3") one value
    per point (None where the series had no value); rank series are busy cores, GPU series utilisation 0-1."""

    def __init__(self, *, node: str, t: list[float], series: dict[str, list[float | None]], stride: int) -> None:
        self.node = node
        self.t = t
        self.series = series
        self.stride = stride  # samples per point


class Report:
    """The whole step. `findings` and `checked` (the rules that applied) are filled by envbuild.report.stepfindings."""

    def __init__(self, *, command: list[str], job: dict[str, str], started: float, ended: float, exit_code: int,
                 interval: float | None, nodes: list[NodeSummary], ranks: list[RankSummary], gpus: list[GpuSummary],
                 launchers: dict[str, dict[str, float]], metrics: dict[str, float], not_measured: list[str],
                 timeline: list[NodeTimeline], records: int, rejected: int) -> None:
        self.command = command
        self.job = job
        self.started = started
        self.ended = ended
        self.exit_code = exit_code
        self.interval = interval
        self.nodes = nodes
        self.ranks = ranks
        self.gpus = gpus
        self.launchers = launchers
        self.metrics = metrics
        self.not_measured = not_measured
        self.timeline = timeline
        self.records = records  # record lines read, and those refused (cut short, not a record)
        self.rejected = rejected
        self.findings: list[Finding] = []
        self.checked: list[str] = []

    @property
    def duration_s(self) -> float:
        return max(0.0, self.ended - self.started)

    def gpus_of(self, node: str) -> list[GpuSummary]:
        return [gpu for gpu in self.gpus if gpu.node == node]

    def ranks_of(self, node: str) -> list[RankSummary]:
        return [rank for rank in self.ranks if rank.node == node]

    def node(self, name: str) -> NodeSummary | None:
        return next((node for node in self.nodes if node.node == name), None)
