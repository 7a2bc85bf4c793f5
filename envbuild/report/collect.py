"""From the nodes' sampler records (envbuild.report.wire) to the step's report (envbuild.report.reportmodel).

A long job sends one sample per node every few seconds for days, so nothing here keeps the records: each
sample updates running sums (means, peaks, idle counts) and a downsampled timeline of at most MAX_POINTS points
per node (when full, neighbouring points are averaged in pairs and later points take twice as many samples).

Records arrive from all nodes interleaved; a sample too long for one pipe write comes as several lines with the
same node, kind, seq and t, one after another from its node: they are merged before the sample counts. A line
that is not a record (cut short, garbage, another schema) is counted and skipped: it costs one sample.

The text in records (node and GPU names, the GPU tool's notes) comes from the nodes, not from envrun: it is kept
as terminaltext.printable makes it, so that no name can steer the terminal the summary is printed on, nor break
a line of it into two.

Light: envrun's step supervisor loads this after every step (the report's own modules and envbuild.shared.terminaltext).
"""

from __future__ import annotations

from envbuild.report.metricline import metric_pairs
from envbuild.report.reportmodel import (
    GPU_IDLE_UTIL,
    RANK_IDLE_CORES,
    GpuSummary,
    NodeSummary,
    NodeTimeline,
    RankSummary,
    Report,
)
from envbuild.report.stepfindings import judge
from envbuild.report.wire import decode
from envbuild.shared.terminaltext import printable

MAX_POINTS = 600  # timeline points per node (even), enough for a plot a few hundred pixels wide
_SPLIT_KEYS = ("ranks", "gpus")


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _float(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    number = float(value)
    return number if number == number and abs(number) != float("inf") else None


def _text(value: object) -> str:
    """A string of a record as it may be printed (see the module's doc); "" for what is not a string."""
    return printable(value) if isinstance(value, str) else ""


def _items(value: object) -> list[dict[str, object]]:
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


class _Timeline:
    """Running buckets of `stride` samples; a bucket's mean is one point."""

    def __init__(self) -> None:
        self.stride = 1
        self.t: list[float] = []
        self.points: list[dict[str, float]] = []
        self.keys: dict[str, None] = {}  # series names in order of first appearance
        self._t_sum = 0.0
        self._count = 0
        self._sums: dict[str, float] = {}
        self._counts: dict[str, int] = {}

    def add(self, t: float, values: dict[str, float]) -> None:
        self._t_sum += t
        self._count += 1
        for key, value in values.items():
            self._sums[key] = self._sums.get(key, 0.0) + value
            self._counts[key] = self._counts.get(key, 0) + 1
            if key not in self.keys:
                self.keys[key] = None
        if self._count >= self.stride:
            self._close_bucket()

    def _close_bucket(self) -> None:
        self.t.append(self._t_sum / self._count)
        self.points.append({key: total / self._counts[key] for key, total in self._sums.items()})
        self._t_sum, self._count, self._sums, self._counts = 0.0, 0, {}, {}
        if len(self.t) >= MAX_POINTS:  # an even number: every merged pair holds the same number of samples
            self._halve()

    def _halve(self) -> None:
        times: list[float] = []
        points: list[dict[str, float]] = []
        for at in range(0, len(self.t) - 1, 2):
            first, second = self.points[at], self.points[at + 1]
            times.append((self.t[at] + self.t[at + 1]) / 2)
            merged = dict(first)
            for key, value in second.items():
                merged[key] = (merged[key] + value) / 2 if key in merged else value
            points.append(merged)
        if len(self.t) % 2:
            times.append(self.t[-1])
            points.append(self.points[-1])
        self.t, self.points = times, points
        self.stride *= 2

    def finished(self, node: str, origin: float) -> NodeTimeline:
        times, points = list(self.t), list(self.points)
        if self._count:  # the bucket in progress
            times.append(self._t_sum / self._count)
            points.append({key: total / self._counts[key] for key, total in self._sums.items()})
        series = {key: [point.get(key) for point in points] for key in self.keys}
        return NodeTimeline(node=node, t=[round(t - origin, 3) for t in times], series=series, stride=self.stride)


class _Rank:
    """One rank across the samples: its total CPU seconds (exact, envbuild.report.procs), its life, and the
    shape of its use between samples. An interval runs from the previous sample (or the rank's start, where its
    CPU count was 0) to this one (or to the rank's end): never past the end, so a rank that has ended adds no
    interval of 0 after it."""

    def __init__(self, node: str) -> None:
        self.node = node
        self.local_rank: int | None = None
        self.cores: int | None = None
        self.pid: int | None = None
        self.last_cpu = 0.0
        self.last_t: float | None = None
        self.busy_s = 0.0
        self.span_s = 0.0
        self.idle_s = 0.0
        self.intervals = 0
        self.rss = 0
        self.threads = 0
        self.procs = 0
        self.cpu_s: float | None = None  # the rank's total so far: the sampler counts a restarted worker's too
        self.source = ""
        self.started: float | None = None
        self.ended: float | None = None
        self.cgroup_cpu_s: float | None = None  # its Slurm task cgroup's figures, where it has one of its own
        self.cgroup_peak: int | None = None

    def sample(self, t: float, item: dict[str, object]) -> float | None:
        """Take one sample of this rank; the busy cores since its previous sample (None when there is no interval)."""
        local_rank, cores, pid = _int(item.get("local_rank")), _int(item.get("cores")), _int(item.get("pid"))
        cpu_s = _float(item.get("cpu_s"))
        started, ended = _float(item.get("started")), _float(item.get("ended"))
        if local_rank is not None:
            self.local_rank = local_rank
        if cores:
            self.cores = cores
        self.rss = max(self.rss, _int(item.get("rss")) or 0, _int(item.get("hwm")) or 0)
        cgroup_cpu = _float(item.get("cgroup_cpu_s"))
        if cgroup_cpu is not None:
            self.cgroup_cpu_s = cgroup_cpu
        cgroup_peak = _int(item.get("cgroup_peak"))
        if cgroup_peak is not None:
            self.cgroup_peak = max(self.cgroup_peak or 0, cgroup_peak)
        self.threads = max(self.threads, _int(item.get("threads")) or 0)
        self.procs = max(self.procs, _int(item.get("procs")) or 0)
        if cpu_s is None:
            return None
        if started is not None and started <= t:
            self.started = started if self.started is None else min(self.started, started)
        self.cpu_s = max(cpu_s, self.cpu_s or 0.0)
        self.source = _text(item.get("cpu_source"))
        self.ended = ended if ended is not None and ended <= t else None
        end = self.ended if self.ended is not None else t
        begin = self.last_t
        if begin is None and started is not None and started < end:
            begin, self.last_cpu = started, 0.0  # its program started here with no CPU seconds yet
        busy: float | None = None
        if begin is not None and end > begin and cpu_s >= self.last_cpu:
            elapsed, used = end - begin, cpu_s - self.last_cpu
            busy = used / elapsed
            self.busy_s += used
            self.span_s += elapsed
            self.intervals += 1
            if busy < RANK_IDLE_CORES:
                self.idle_s += elapsed
        self.pid, self.last_cpu = pid, cpu_s
        if begin is None or end > begin:
            self.last_t = end
        return busy

    def summary(self, name: str, number: int, origin: float, last: float | None) -> RankSummary:
        """Its figures, times relative to the step's start (`origin`); `last`: the node's last record."""
        total = self.cpu_s
        end = self.ended if self.ended is not None else last
        life = end - self.started if self.started is not None and end is not None else None
        if life is not None and life > 0 and total is not None:
            cores: float | None = total / life
        else:  # no start known (an old sampler): the sampled intervals
            cores = self.busy_s / self.span_s if self.span_s > 0 else None
        return RankSummary(rank=number, node=name, local_rank=self.local_rank, cores=self.cores, cpu_cores=cores,
                           idle_fraction=self.idle_s / self.span_s if self.span_s > 0 else None,
                           rss_bytes=max(self.rss, self.cgroup_peak or 0), threads=self.threads, procs=self.procs, intervals=self.intervals,
                           cpu_s=None if total is None else round(total, 2), cpu_source=self.source,
                           cgroup_cpu_s=self.cgroup_cpu_s, cgroup_peak_bytes=self.cgroup_peak,
                           started_s=None if self.started is None else round(self.started - origin, 3),
                           ended_s=None if end is None else round(end - origin, 3))


class _Gpu:
    def __init__(self) -> None:
        self.name = ""
        self.mem_total: int | None = None
        self.util_sum = 0.0
        self.util_count = 0
        self.util_max: float | None = None
        self.busy = 0
        self.mem_peak: int | None = None

    def sample(self, item: dict[str, object]) -> float | None:
        util = _float(item.get("util"))
        mem_used, mem_total = _int(item.get("mem_used")), _int(item.get("mem_total"))
        if mem_total:
            self.mem_total = mem_total
        if mem_used is not None:
            self.mem_peak = mem_used if self.mem_peak is None else max(self.mem_peak, mem_used)
        if util is None:
            return None
        util = min(1.0, max(0.0, util))
        self.util_sum += util
        self.util_count += 1
        self.util_max = util if self.util_max is None else max(self.util_max, util)
        if util >= GPU_IDLE_UTIL:
            self.busy += 1
        return util


class _Node:
    def __init__(self, name: str) -> None:
        self.name = name
        self.started = False
        self.cpus: int | None = None
        self.gpu_source: str | None = None
        self.gpu_note = ""
        self.gpu_sampling = ""
        self.interval: float | None = None
        self.samples = 0
        self.first: float | None = None
        self.last: float | None = None
        self.load_sum = 0.0
        self.load_count = 0
        self.ended = ""
        self.ranks: dict[int, _Rank] = {}
        self.gpus: dict[int, _Gpu] = {}
        self.launcher: dict[str, float] = {}
        self.timeline = _Timeline()
        self.pending: dict[str, object] | None = None

    def start(self, record: dict[str, object]) -> None:
        self.started = True
        self.cpus = _int(record.get("cpus")) or self.cpus
        self.gpu_source = _text(record.get("gpu_source")) or None
        self.gpu_note = _text(record.get("gpu_note"))
        self.gpu_sampling = _text(record.get("gpu_sampling"))
        self.interval = _float(record.get("interval"))
        for item in _items(record.get("gpu_names")):
            index = _int(item.get("index"))
            if index is None:
                continue
            gpu = self.gpus.setdefault(index, _Gpu())
            gpu.name = _text(item.get("name"))
            gpu.mem_total = _int(item.get("mem_total")) or gpu.mem_total

    def part(self, record: dict[str, object]) -> None:
        """One line of a sample or end record: merged with the lines before it of the same sample."""
        pending = self.pending
        if pending is not None and all(pending.get(key) == record.get(key) for key in ("kind", "seq", "t")):
            for key in _SPLIT_KEYS:
                items = record.get(key)
                if isinstance(items, list):
                    held = pending.get(key)
                    pending[key] = [*held, *items] if isinstance(held, list) else list(items)
            return
        self.flush()
        self.pending = dict(record)

    def flush(self) -> None:
        record, self.pending = self.pending, None
        if record is not None:
            self._sample(record)

    def _sample(self, record: dict[str, object]) -> None:
        t = _float(record.get("t"))
        if t is None or (self.last is not None and t <= self.last):
            return  # no time, or a repeat: nothing to measure against
        if record.get("kind") == "end":
            self.ended = _text(record.get("reason")) or "end"
        self.samples += 1
        self.first = t if self.first is None else self.first
        self.last = t
        load = _float(record.get("load1"))
        if load is not None:
            self.load_sum += load
            self.load_count += 1
        values: dict[str, float] = {}
        for item in _items(record.get("ranks")):
            number = _int(item.get("rank"))
            if number is None:
                continue
            rank = self.ranks.get(number)
            if rank is None:
                rank = self.ranks[number] = _Rank(self.name)
            busy = rank.sample(t, item)
            if busy is not None:
                values[f"rank {number}"] = busy
        for item in _items(record.get("gpus")):
            index = _int(item.get("index"))
            if index is None:
                continue
            gpu = self.gpus.get(index)
            if gpu is None:
                gpu = self.gpus[index] = _Gpu()
            util = gpu.sample(item)
            if util is not None:
                values[f"GPU {index}"] = util
        launcher = record.get("launcher")
        if isinstance(launcher, dict):
            for key in ("procs", "rss"):
                number = _int(launcher.get(key))
                if number is not None:
                    self.launcher[key] = max(self.launcher.get(key, 0), number)
            cpu_s = _float(launcher.get("cpu_s"))
            if cpu_s is not None:
                self.launcher["cpu_s"] = cpu_s
        self.timeline.add(t, values)


class Collector:
    """Feed it the records and the metric lines as they come; `build` once when the step has ended."""

    def __init__(self, command: list[str], job: dict[str, str]) -> None:
        self.command = list(command)
        self.job = dict(job)
        self.metrics: dict[str, float] = {}
        self.records = 0
        self.rejected = 0
        self._nodes: dict[str, _Node] = {}

    def feed(self, payload: str) -> None:
        """The text after wire.MARKER on one line."""
        record = decode(payload.rstrip("\r\n"))
        node_name = _text(record.get("node")) if record is not None else ""
        if record is None or not node_name:
            self.rejected += 1
            return
        self.records += 1
        node = self._nodes.get(node_name)
        if node is None:
            node = self._nodes[node_name] = _Node(node_name)
        kind = record.get("kind")
        if kind == "start":
            node.flush()
            node.start(record)
        elif kind in ("sample", "end"):
            node.part(record)
        else:
            self.records -= 1
            self.rejected += 1

    def metric(self, line: str) -> None:
        """An `envrun-metric: key=value ...` line of the step's stderr: the last one counts."""
        pairs = metric_pairs(line)
        if pairs:
            self.metrics = pairs

    def build(self, exit_code: int, started: float, ended: float) -> Report:
        """The report of the step, judged by the rules of envbuild.report.stepfindings."""
        nodes: list[NodeSummary] = []
        ranks: list[RankSummary] = []
        gpus: list[GpuSummary] = []
        launchers: dict[str, dict[str, float]] = {}
        timeline: list[NodeTimeline] = []
        not_measured: list[str] = []
        for name in sorted(self._nodes):
            node = self._nodes[name]
            node.flush()
            nodes.append(NodeSummary(node=name, cpus=node.cpus, gpu_source=node.gpu_source, gpu_note=node.gpu_note,
                                     load1_mean=node.load_sum / node.load_count if node.load_count else None,
                                     samples=node.samples, first=node.first, last=node.last,
                                     gpu_sampling=node.gpu_sampling))
            node_ranks = [node.ranks[number].summary(name, number, started, node.last)
                          for number in sorted(node.ranks)]
            ranks += node_ranks
            starts = [rank.started_s for rank in node_ranks if rank.started_s is not None]
            nodes[-1].startup_s = max(0.0, min(starts)) if starts else None
            for index in sorted(node.gpus):
                gpu = node.gpus[index]
                count = gpu.util_count
                gpus.append(GpuSummary(node=name, index=index, name=gpu.name,
                                       util=gpu.util_sum / count if count else None, util_max=gpu.util_max,
                                       busy_fraction=gpu.busy / count if count else None,
                                       mem_used_bytes=gpu.mem_peak, mem_total_bytes=gpu.mem_total, samples=count))
            if node.launcher:
                launchers[name] = dict(node.launcher)
            timeline.append(node.timeline.finished(name, started))
            not_measured += _unmeasured_on(node, ended - started)
        if not self._nodes:
            not_measured.append("everything: no sampler record reached envrun (the step ended before the first "
                                "sample, or the sampler could not start)")
        if not self.metrics:
            not_measured.append("throughput: the program printed no `envrun-metric:` line")
        if self.rejected:
            not_measured.append(f"{self.rejected} record line{'s' if self.rejected != 1 else ''} could not be read "
                                "(cut short or not a record): those samples are missing")
        interval = next((node.interval for node in self._nodes.values() if node.interval), None)
        report = Report(command=self.command, job=self.job, started=started, ended=ended, exit_code=exit_code,
                        interval=interval, nodes=nodes, ranks=ranks, gpus=gpus, launchers=launchers,
                        metrics=dict(self.metrics), not_measured=not_measured, timeline=timeline,
                        records=self.records, rejected=self.rejected)
        judge(report)
        return report


def _unmeasured_on(node: _Node, duration: float) -> list[str]:
    """What could not be measured on this node, each with why."""
    found: list[str] = []
    name = node.name
    if not node.started:
        found.append(f"CPUs and GPU names on {name}: the sampler's first record did not arrive")
    if node.started and node.gpu_source is None:
        found.append(f"GPUs on {name}: {node.gpu_note or 'no GPU tool answered'}")
    elif node.gpu_source is not None and node.gpu_note:
        found.append(f"GPUs on {name} ({node.gpu_source}): {node.gpu_note}")
    for index, gpu in sorted(node.gpus.items()):
        if node.gpu_source is not None and node.samples >= 1 and not gpu.util_count:
            found.append(f"utilisation of GPU {index} on {name}: {node.gpu_source} gave no value")
    if not node.ranks and node.samples < 2:
        found.append(f"use on {name}: {node.samples} sample{'s' if node.samples != 1 else ''} in {duration:.1f} s, "
                     "no rank seen: the step ended before its ranks could be read")
    for number, rank in sorted(node.ranks.items()):
        if rank.started is None and not rank.intervals:
            found.append(f"CPU use of rank {number} on {name}: seen in one sample only, with no start time")
    return found
