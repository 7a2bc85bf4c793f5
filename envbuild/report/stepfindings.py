"""The findings of a step's report: rules over the collected model (envbuild.report.reportmodel) that name a problem
and its fix. Pure: no I/O, the same report gives the same findings.

Each rule says when it applies (it returns None when the report holds nothing it could judge, e.g. no GPU was
measured) and what it found; `judge` keeps the names of the rules that applied, so a clean summary can say
what was checked instead of "all good". The thresholds below are named once here; docs/concepts/report.md
gives each one's public source and what the rules compute.
"""

from __future__ import annotations

from envbuild.report.reportmodel import GPU_IDLE_UTIL, Finding, GpuSummary, RankSummary, Report

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

GPU_BUSY_UTIL = 0.5  # a GPU at or above this mean utilisation is busy (Princeton's GPU efficiency target, 50 %)
# A rank idle (under RANK_IDLE_CORES) in this share of its life, with an exact mean under RANK_IDLE_RATIO of the
# busiest rank's, is idle: its program's start (imports, a few tenths of a second of one core) is the rest.
RANK_IDLE_SHARE = 0.75
RANK_BUSY_SHARE = 0.5  # ... while another rank, idle in less than this share, computes
CPU_SATURATED = 0.9  # busy cores / cores at or above this: the CPUs are the bottleneck (SageMaker's CPUBottleneck, 90 %)
ONE_CORE_BUSY = 0.9  # busy cores of a one-process rank at or above this: its one process is saturated
GPU_MEMORY_FULL = 0.95  # peak memory / total at or above this: close to out-of-memory
MIN_SAMPLES = 2  # a GPU needs this many utilisation samples to be judged
SLOW_START_S = 30.0  # a start-up this long, and SLOW_START_SHARE of the step or more, is worth a note
SLOW_START_SHARE = 0.2
MIN_RANK_LIFE_S = 1.0  # a rank's CPU total is judged over at least this long a life (start-up noise dominates below)
RANK_IDLE_RATIO = 0.1  # an idle rank's exact mean busy cores are under this share of the busiest rank's

LOCAL_RANK_FIX = ("give each rank its own GPU: torch.cuda.set_device(int(os.environ['LOCAL_RANK'])) before the model "
                  "is built, then model.to('cuda') and DDP(model, device_ids=[local_rank]); a hard-coded 'cuda:0' "
                  "puts every rank on GPU 0")


def judge(report: Report) -> None:
    """Run every rule over `report`: its findings (problems first) and the names of the rules that applied."""
    findings: list[Finding] = []
    checked: list[str] = []
    for name, rule in RULES:
        found = rule(report)
        if found is None:
            continue
        checked.append(name)
        findings += found
    report.findings = [f for f in findings if f.level == "problem"] + [f for f in findings if f.level != "problem"]
    report.checked = checked


def numbers(values: list[int]) -> str:
    """[1, 2, 3, 5, 7, 8] -> "1-3, 5, 7, 8": runs of three or more as a range."""
    parts: list[str] = []
    ordered = sorted(values)
    at = 0
    while at < len(ordered):
        end = at
        while end + 1 < len(ordered) and ordered[end + 1] == ordered[end] + 1:
            end += 1
        if end - at >= 2:
            parts.append(f"{ordered[at]}-{ordered[end]}")
        else:
            parts += [str(value) for value in ordered[at:end + 1]]
        at = end + 1
    return ", ".join(parts)


def percent(fraction: float) -> str:
    return f"{round(fraction * 100)} %"


def _plural(word: str, count: int) -> str:
    return word if count == 1 else word + "s"


def _measured_gpus(report: Report, node: str) -> list[GpuSummary]:
    return [gpu for gpu in report.gpus_of(node) if gpu.util is not None and gpu.samples >= MIN_SAMPLES]


def _measured_ranks(report: Report) -> list[RankSummary]:
    """Ranks whose CPU figures can carry a finding: an exact total over a life of MIN_RANK_LIFE_S or more (or,
    from a sampler without start times, MIN_SAMPLES intervals)."""
    return [rank for rank in report.ranks if rank.idle_fraction is not None and rank.cpu_cores is not None
            and ((rank.life_s or 0.0) >= MIN_RANK_LIFE_S if rank.started_s is not None
                 else rank.intervals >= MIN_SAMPLES)]


def _util(gpu: GpuSummary) -> float:
    return gpu.util or 0.0


def one_gpu_busy(report: Report) -> list[Finding] | None:
    """Applies to nodes with two or more measured GPUs: one busy, every other idle. The classic of a script that
    puts every rank on cuda:0, or of one process started for a node's GPUs."""
    applied = False
    found: list[Finding] = []
    for node in report.nodes:
        gpus = _measured_gpus(report, node.node)
        if len(gpus) < 2:
            continue
        applied = True
        busy = [gpu for gpu in gpus if _util(gpu) >= GPU_BUSY_UTIL]
        idle = [gpu for gpu in gpus if _util(gpu) < GPU_IDLE_UTIL]
        if len(busy) != 1 or len(idle) != len(gpus) - 1:
            continue
        ranks = report.ranks_of(node.node)
        word = _plural("GPU", len(idle))
        what = (f"node {node.node}: GPU {busy[0].index} busy {percent(_util(busy[0]))}, {word} "
                f"{numbers([gpu.index for gpu in idle])} idle: only one process uses a GPU")
        if len(ranks) >= 2:
            fix = f"the {len(ranks)} ranks on this node all compute on one GPU; {LOCAL_RANK_FIX}"
        else:
            fix = (f"one process runs on this node for {len(gpus)} GPUs: start one per GPU (torchrun "
                   f"--nproc-per-node={len(gpus)}, or srun --ntasks-per-node={len(gpus)}), or ask for one GPU")
        found.append(Finding(level="problem", what=what, fix=fix, rule="one-gpu-busy"))
    return found if applied else None


def idle_gpus(report: Report) -> list[Finding] | None:
    """Applies to nodes with measured GPUs: some idle while others are busy (beyond the one-busy case), or all
    idle (the program ran on the CPU)."""
    applied = False
    found: list[Finding] = []
    for node in report.nodes:
        gpus = _measured_gpus(report, node.node)
        if not gpus:
            continue
        applied = True
        busy = [gpu for gpu in gpus if _util(gpu) >= GPU_BUSY_UTIL]
        idle = [gpu for gpu in gpus if _util(gpu) < GPU_IDLE_UTIL]
        ranks = len(report.ranks_of(node.node))
        if len(idle) == len(gpus):
            found.append(Finding(
                level="problem", rule="idle-gpus",
                what=f"node {node.node}: {'the GPU' if len(gpus) == 1 else f'all {len(gpus)} GPUs'} idle (mean "
                     f"utilisation under {percent(GPU_IDLE_UTIL)})",
                fix="the program computed on the CPU or waited: check torch.cuda.is_available() inside the container "
                    "(`envrun doctor` shows whether the GPUs are visible) and that the model and batches are moved "
                    "to the GPU"))
        elif idle and busy and not (len(busy) == 1 and len(idle) == len(gpus) - 1):
            mean = sum(_util(gpu) for gpu in busy) / len(busy)
            found.append(Finding(
                level="problem", rule="idle-gpus",
                what=f"node {node.node}: {_plural('GPU', len(idle))} {numbers([g.index for g in idle])} idle while "
                     f"{_plural('GPU', len(busy))} {numbers([g.index for g in busy])} "
                     f"{'is' if len(busy) == 1 else 'are'} busy (mean {percent(mean)})",
                fix=f"{ranks} {_plural('rank', ranks)} on this node use {len(busy)} of its {len(gpus)} GPUs: start one "
                    f"rank per GPU, each on its own device ({LOCAL_RANK_FIX}), or ask for {len(busy)} GPUs"))
    return found if applied else None


def _own_gpu(report: Report, rank: RankSummary) -> GpuSummary | None:
    """The GPU a rank would use by its LOCAL_RANK: the local_rank-th of its node's job GPUs."""
    gpus = report.gpus_of(rank.node)
    if rank.local_rank is None or not 0 <= rank.local_rank < len(gpus):
        return None
    return gpus[rank.local_rank]


def idle_rank(report: Report) -> list[Finding] | None:
    """Applies when two or more ranks had their CPU use measured: a rank idle (under RANK_IDLE_CORES of a core)
    in RANK_IDLE_SHARE of its life, and with an exact mean under RANK_IDLE_RATIO of the busiest rank's, while
    another computes; a step whose ranks ran under MIN_RANK_LIFE_S gets a note saying so. A rank whose own GPU is busy waits on it (a
    GPU program may sleep while its kernels run): not named."""
    ranks = _measured_ranks(report)
    if len(ranks) < 2:
        short = [rank for rank in report.ranks if rank.life_s is not None and rank.life_s < MIN_RANK_LIFE_S]
        if len(report.ranks) >= 2 and short:
            longest = max(rank.life_s or 0.0 for rank in short)
            return [Finding(level="note", rule="idle-rank",
                            what=f"the ranks ran {longest:.1f} s at most: too short to tell an idle rank "
                                 f"(it takes {MIN_RANK_LIFE_S:g} s)",
                            fix="judge a step that trains for a while; the figures above are still exact")]
        return None
    busiest = max(rank.cpu_cores or 0.0 for rank in ranks)
    busy = [rank for rank in ranks if (rank.idle_fraction or 0.0) < RANK_BUSY_SHARE]
    # Idle by its samples and by its exact total: a rank that computed in bursts between samples is not idle.
    idle = [rank for rank in ranks if (rank.idle_fraction or 0.0) >= RANK_IDLE_SHARE
            and (rank.cpu_cores or 0.0) < RANK_IDLE_RATIO * busiest]
    idle = [rank for rank in idle if (gpu := _own_gpu(report, rank)) is None or _util(gpu) < GPU_BUSY_UTIL]
    if not busy or not idle:
        return []
    shares = sorted(rank.idle_fraction or 0.0 for rank in idle)
    share = percent(shares[0]) if len(idle) == 1 or percent(shares[0]) == percent(shares[-1]) else \
        f"{round(shares[0] * 100)}-{percent(shares[-1])}"
    nodes = sorted({rank.node for rank in idle})
    where = f" (node {nodes[0]})" if len(nodes) == 1 and len(report.nodes) > 1 else ""
    what = (f"{_plural('rank', len(idle))} {numbers([r.rank for r in idle])}{where} idle {share} of the step while "
            f"{_plural('rank', len(busy))} {numbers([r.rank for r in busy])} computed")
    fix = ("every rank should get its share of the work: a DistributedSampler (or data sharded by RANK and "
           "WORLD_SIZE), and no training under `if rank == 0`; a rank that only waits for the others wastes what "
           "it was given")
    return [Finding(level="problem", what=what, fix=fix, rule="idle-rank")]


def input_bound(report: Report) -> list[Finding] | None:
    """Applies to nodes with measured GPUs and measured ranks: every GPU in use but their mean under GPU_BUSY_UTIL,
    while a rank's CPUs are saturated (all its cores, or its only process at one core: no DataLoader workers)."""
    applied = False
    found: list[Finding] = []
    measured = _measured_ranks(report)
    for node in report.nodes:
        gpus = _measured_gpus(report, node.node)
        ranks = [rank for rank in measured if rank.node == node.node]
        if not gpus or not ranks:
            continue
        applied = True
        util = sum(_util(gpu) for gpu in gpus) / len(gpus)
        if util >= GPU_BUSY_UTIL or min(_util(gpu) for gpu in gpus) < GPU_IDLE_UTIL:
            continue  # busy enough, or idle GPUs: the idle-GPU rules name those
        per_gpu = node.cpus // len(gpus) if node.cpus else None
        saturated = [rank for rank in ranks if (rank.cpu_util or 0.0) >= CPU_SATURATED]
        single = [rank for rank in ranks if rank not in saturated and rank.procs == 1
                  and (rank.cpu_cores or 0.0) >= ONE_CORE_BUSY]
        if saturated:
            cores = sorted({rank.cores or 0 for rank in saturated})
            found.append(Finding(
                level="problem", rule="input-bound",
                what=f"node {node.node}: GPUs wait on the CPUs: GPU {percent(util)}, all "
                     f"{'/'.join(map(str, cores))} cores of {_plural('rank', len(saturated))} "
                     f"{numbers([r.rank for r in saturated])} busy",
                fix=("ask for more cores per GPU" + (f" (the step has {per_gpu} per GPU on this node)" if per_gpu else "")
                     + " with --cpus-per-task, or run fewer threads per rank (OMP_NUM_THREADS, torch.set_num_threads, "
                     "fewer DataLoader workers)")))
        if single:
            workers = f"num_workers={max(1, per_gpu - 1)}" if per_gpu else "num_workers=N"
            found.append(Finding(
                level="problem", rule="input-bound",
                what=f"node {node.node}: GPUs wait on the input pipeline: GPU {percent(util)}, "
                     f"{_plural('rank', len(single))} {numbers([r.rank for r in single])} busy one core in one "
                     "process (DataLoader num_workers=0)",
                fix=(f"load batches in worker processes: DataLoader(..., {workers}, pin_memory=True)"
                     + (f"; the node has {per_gpu} cores per GPU, one stays with the training process" if per_gpu
                        else ""))))
    return found if applied else None


def gpu_memory(report: Report) -> list[Finding] | None:
    """Applies to GPUs whose memory was measured: a peak at or above GPU_MEMORY_FULL of the total."""
    measured = [gpu for gpu in report.gpus if gpu.mem_fraction is not None]
    if not measured:
        return None
    found: list[Finding] = []
    for node in report.nodes:
        full = [gpu for gpu in measured if gpu.node == node.node and (gpu.mem_fraction or 0.0) >= GPU_MEMORY_FULL]
        if not full:
            continue
        fractions = sorted(gpu.mem_fraction or 0.0 for gpu in full)
        share = percent(fractions[-1]) if percent(fractions[0]) == percent(fractions[-1]) else \
            f"{round(fractions[0] * 100)}-{percent(fractions[-1])}"
        found.append(Finding(
            level="note", rule="gpu-memory",
            what=f"node {node.node}: GPU memory {share} at its peak ({_plural('GPU', len(full))} "
                 f"{numbers([g.index for g in full])})",
            fix="close to the limit a longer sequence or a larger batch runs out of memory; the peak includes what "
                "PyTorch's caching allocator keeps (torch.cuda.max_memory_allocated() tells what tensors needed); "
                "if it fails: a smaller batch, activation checkpointing or mixed precision"))
    return found


def slow_start(report: Report) -> list[Finding] | None:
    """Applies to nodes where a rank's program start was seen: the time from the step's start to it (the
    container's start and the launcher's own imports) at SLOW_START_S or more and SLOW_START_SHARE of the step
    or more. It is not idle time of the ranks: idle-rank counts from each rank's own start."""
    known = [node for node in report.nodes if node.startup_s is not None]
    if not known:
        return None
    slow = [node for node in known if (node.startup_s or 0.0) >= SLOW_START_S
            and (node.startup_s or 0.0) >= SLOW_START_SHARE * report.duration_s]
    if not slow:
        return []
    longest = max(node.startup_s or 0.0 for node in slow)
    names = ", ".join(node.node for node in slow[:4]) + (f" and {len(slow) - 4} more" if len(slow) > 4 else "")
    return [Finding(level="note", rule="slow-start",
                    what=f"{_plural('node', len(slow))} {names}: the ranks' programs started up to {longest:.0f} s "
                         f"after the step ({percent(longest / report.duration_s)} of it)",
                    fix="the start-up is the container's (reading the image) and the launcher's own imports "
                        "(torchrun imports torch before it starts the ranks): keep the image on a fast file system "
                        "or copy it to node-local disk in the job, and run the work of several steps in one step so "
                        "that it is paid once")]


def failed_step(report: Report) -> list[Finding] | None:
    """Applies to every step: one that failed is reported up to its end, and says so."""
    if report.exit_code == 0:
        return []
    return [Finding(level="note", rule="failed-step",
                    what=f"the step ended with exit code {report.exit_code}: the figures cover it until then",
                    fix="the cause is in the step's output above (envrun's last line names it when it can)")]


RULES: tuple[tuple[str, Callable[[Report], list[Finding] | None]], ...] = (
    ("one-gpu-busy", one_gpu_busy),
    ("idle-gpus", idle_gpus),
    ("idle-rank", idle_rank),
    ("input-bound", input_bound),
    ("gpu-memory", gpu_memory),
    ("slow-start", slow_start),
    ("failed-step", failed_step),
)
