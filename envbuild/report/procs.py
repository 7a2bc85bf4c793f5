"""What the processes of one step on this node use of the CPUs and memory, read from /proc.

The sampler (sampler.py) runs beside the training processes with `python -S`, so this module is stdlib
only and reads /proc with plain os calls: every open costs the node's cores a little, every sample.

The step's processes are the descendants of the step's pid (slurmstepd: its children are the step's
tasks on this node), found from the parent pid of every process on the node. They are grouped into
ranks by the RANK in their environment (record.md): a process belongs to the rank of its nearest
ancestor-or-self that has RANK, so DataLoader workers, which inherit RANK, and helper processes started
with a cleaned environment both count for their rank; the rank's main process is the highest ancestor
with the same RANK value. Processes under no RANK are the launcher (torchrun, shims, apptainer).

CPU time is counted exactly where the kernel keeps it, never estimated from processes that have gone:
- a live process counts its own CPU seconds (utime + stime) and those of the children it has waited for
  (cutime + cstime, proc(5)): the kernel adds a child's whole final CPU time, with its own waited-for
  children, to its parent when the parent reaps it (wait4(2)), so a DataLoader worker that ended between two
  samples is counted to its last tick by the rank process that joined it;
- a process that has gone counts its final CPU seconds for its group, taken, best first, from its own stat
  read after it exited and before it was reaped (a zombie still shows its final times), from the growth of its
  reaper's cutime + cstime when it was that reaper's only child to go, else from its last read; the sampler
  watches each rank's main process for its exit (pidfd) so that the read comes at once. What a reaper of
  another group (torchrun, apptainer's starter) received that way is taken off that group, so nothing is
  counted twice. `cpu_source` says which of these a rank's total rests on.
"""

from __future__ import annotations

import os
import time

PROC = "/proc"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096

LAUNCHER = "launcher"  # the group of the step's processes without a rank
FULL_SCAN_EVERY = 10  # samples: every tenth reads every process of the node again (see StepProcs.step_processes)


class Stat:
    """The fields of /proc/PID/stat the report uses. `start` (clock ticks after boot) tells a process
    from a later one that got the same pid; `comm` changes when the process execs."""

    __slots__ = ("comm", "cpu_s", "ppid", "reaped_s", "rss", "start", "state", "threads")

    def __init__(self, comm: str, state: str, ppid: int, cpu_s: float, threads: int, start: int, rss: int,
                 reaped_s: float = 0.0) -> None:
        self.comm = comm
        self.state = state
        self.ppid = ppid
        self.cpu_s = cpu_s  # its own user + system seconds
        self.reaped_s = reaped_s  # those of the children it waited for (cutime + cstime)
        self.threads = threads
        self.start = start
        self.rss = rss

    @property
    def total_s(self) -> float:
        return self.cpu_s + self.reaped_s


def parse_stat(text: str) -> Stat | None:
    """The fields of one /proc/PID/stat line; None when it is not one. The command name (field 2) is in
    parentheses and may itself hold spaces and parentheses, so the fields after it start after the last ')'."""
    opening = text.find("(")
    closing = text.rfind(")")
    if opening < 0 or closing < opening:
        return None
    fields = text[closing + 1 :].split()
    # fields[0] is field 3 of proc(5) (state): field N is fields[N - 3]
    try:
        return Stat(
            comm=text[opening + 1 : closing],
            state=fields[0],
            ppid=int(fields[1]),
            cpu_s=(int(fields[11]) + int(fields[12])) / CLOCK_TICKS,  # utime + stime
            reaped_s=(int(fields[13]) + int(fields[14])) / CLOCK_TICKS,  # cutime + cstime
            threads=int(fields[17]),
            start=int(fields[19]),
            rss=int(fields[21]) * PAGE_SIZE,
        )
    except (IndexError, ValueError):
        return None


def parse_ppid(text: str) -> int | None:
    """The parent pid (field 4) of a /proc/PID/stat line, without parsing the rest."""
    closing = text.rfind(")")
    parts = text[closing + 1 : closing + 40].split(None, 2)
    try:
        return int(parts[1]) if closing >= 0 else None
    except (IndexError, ValueError):
        return None


def _read(path: str, limit: int = 65536) -> bytes | None:
    """The bytes of a /proc file, None when it is gone or not readable (the process exited, or belongs to
    someone else)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        return os.read(fd, limit)
    except OSError:
        return None
    finally:
        os.close(fd)


def read_stat(pid: int, proc_root: str = PROC) -> Stat | None:
    data = _read(f"{proc_root}/{pid}/stat", 4096)
    return None if data is None else parse_stat(data.decode("utf-8", "replace"))


def list_pids(proc_root: str = PROC) -> list[int]:
    """Every process on the node (the numeric names in /proc)."""
    try:
        return [int(name) for name in os.listdir(proc_root) if name.isdigit()]
    except OSError:
        return []


def parse_environ(data: bytes, names: tuple[str, ...]) -> dict[str, str]:
    """The values of `names` in a NUL-separated /proc/PID/environ."""
    wanted = {name.encode() + b"=" for name in names}
    found: dict[str, str] = {}
    for entry in data.split(b"\0"):
        equals = entry.find(b"=")
        if equals > 0 and entry[: equals + 1] in wanted:
            found[entry[:equals].decode()] = entry[equals + 1 :].decode("utf-8", "replace")
    return found


def _int_or_none(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return int(text.strip())
    except ValueError:
        return None


def read_rank(pid: int, proc_root: str = PROC) -> tuple[int | None, int | None]:
    """(RANK, LOCAL_RANK) of the process, each None when unset, not a number or not readable: a process
    whose environment cannot be read (another user's, or a setuid program's) is no rank."""
    data = _read(f"{proc_root}/{pid}/environ", 1 << 20)
    if data is None:
        return None, None
    values = parse_environ(data, ("RANK", "LOCAL_RANK"))
    return _int_or_none(values.get("RANK")), _int_or_none(values.get("LOCAL_RANK"))


def parse_cpu_list(text: str) -> set[int]:
    """The CPUs of a kernel CPU list such as "0-3,8,10-11"; empty when it is not one."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        low, dash, high = part.partition("-")
        try:
            cpus.update(range(int(low), int(high) + 1) if dash else (int(low),))
        except ValueError:
            return set()
    return cpus


def read_allowed_cpus(pid: int, proc_root: str = PROC) -> set[int]:
    """The CPUs the process may run on (Cpus_allowed_list of /proc/PID/status); empty when unreadable."""
    data = _read(f"{proc_root}/{pid}/status")
    if data is None:
        return set()
    for line in data.decode("utf-8", "replace").splitlines():
        if line.startswith("Cpus_allowed_list:"):
            return parse_cpu_list(line.partition(":")[2])
    return set()


def read_status(pid: int, proc_root: str = PROC) -> tuple[set[int], int | None]:
    """(CPUs the process may run on, its peak resident memory in bytes: VmHWM) from /proc/PID/status; empty and
    None where unreadable. VmHWM is the kernel's own high-water mark of the process, between samples too."""
    data = _read(f"{proc_root}/{pid}/status")
    cpus: set[int] = set()
    peak: int | None = None
    if data is None:
        return cpus, peak
    for line in data.decode("utf-8", "replace").splitlines():
        if line.startswith("Cpus_allowed_list:"):
            cpus = parse_cpu_list(line.partition(":")[2])
        elif line.startswith("VmHWM:"):
            value = line.partition(":")[2].split()
            peak = int(value[0]) * 1024 if value and value[0].isdigit() else None
    return cpus, peak


CGROUP_ROOT = "/sys/fs/cgroup"


def task_cgroup(pid: int, proc_root: str = PROC, cgroup_root: str = CGROUP_ROOT) -> tuple[str, ...] | None:
    """The directories of the Slurm task cgroup the process is in (its cgroup path ends in `task_N` under a
    `job_X/step_Y`, as Slurm's task/cgroup plugin makes them: cgroup/v2 `.../job_X/step_Y/user/task_N`, cgroup/v1
    `/slurm/uid_U/job_X/step_Y/task_N` per controller), or None where there is none (proctrack/linuxproc, a
    laptop). v2: one directory; v1: the cpuacct and memory controllers' directories."""
    data = _read(f"{proc_root}/{pid}/cgroup")
    if data is None:
        return None
    unified: str | None = None
    per_controller: dict[str, str] = {}
    for line in data.decode("utf-8", "replace").splitlines():
        _number, _colon, rest = line.partition(":")
        controllers, _colon, path = rest.partition(":")
        if not _is_task_path(path):
            continue
        if controllers == "":
            unified = f"{cgroup_root}{path}"
        for controller in controllers.split(","):
            if controller in ("cpuacct", "memory"):
                per_controller[controller] = f"{cgroup_root}/{controllers}{path}"
    if unified is not None:
        return (unified,)
    if "cpuacct" in per_controller:
        return tuple(per_controller[name] for name in ("cpuacct", "memory") if name in per_controller)
    return None


def _is_task_path(path: str) -> bool:
    parts = path.rstrip("/").split("/")
    return len(parts) >= 3 and parts[-1].startswith("task_") and any(p.startswith("job_") for p in parts) and \
        any(p.startswith("step_") for p in parts)


def read_cgroup_usage(directories: tuple[str, ...]) -> tuple[float | None, int | None]:
    """(CPU seconds, peak memory in bytes) of a cgroup as its kernel counts them, each None where not readable:
    v2 `cpu.stat` usage_usec and `memory.peak` (Linux 5.19), v1 `cpuacct.usage` (ns) and
    `memory.max_usage_in_bytes`. Every process that was ever in it counts, those that have ended too."""
    cpu: float | None = None
    peak: int | None = None
    for directory in directories:
        stat = _read(f"{directory}/cpu.stat")
        if stat is not None:
            for line in stat.decode("ascii", "replace").splitlines():
                if line.startswith("usage_usec "):
                    cpu = int(line.split()[1]) / 1e6
        usage = _read(f"{directory}/cpuacct.usage", 64)
        if usage is not None and usage.strip().isdigit():
            cpu = int(usage.strip()) / 1e9
        for name in ("memory.peak", "memory.max_usage_in_bytes"):
            value = _read(f"{directory}/{name}", 64)
            if value is not None and value.strip().isdigit():
                peak = int(value.strip())
    return cpu, peak


def read_uptime(proc_root: str = PROC) -> float | None:
    """Seconds since boot (the first field of /proc/uptime): with a process's start (clock ticks after boot) it
    gives when the process started, to the tick."""
    data = _read(f"{proc_root}/uptime", 256)
    try:
        return float(data.split()[0]) if data else None
    except (IndexError, ValueError):
        return None


def read_load1(proc_root: str = PROC) -> float | None:
    """The node's load average over one minute, the first field of /proc/loadavg."""
    data = _read(f"{proc_root}/loadavg", 256)
    try:
        return float(data.split()[0]) if data else None
    except (IndexError, ValueError):
        return None


def descendants(root: int, parents: dict[int, int], skip: int | None = None) -> list[int]:
    """The pids under `root` (not root itself), parents before children, from a pid -> parent pid table;
    without `skip` and its descendants."""
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        if pid != skip:
            children.setdefault(ppid, []).append(pid)
    found: list[int] = []
    todo = list(children.get(root, ()))
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, ()))
    return found


# Where a rank's CPU total comes from (cpu_source in its records, docs/concepts/report.md).
AT_EXIT = "exit"  # read after its main process ended: its own stat as a zombie, or its reaper's cutime + cstime
LAST_READ = "last-read"  # its main process's last read before it went (the exit read was missed)
RUNNING = "running"  # it was still running at this sample

# Two clock ticks: how far a reaper's cutime may fall short of a child's last read and still hold it (both are
# counted in ticks, rounded separately).
_TICK_SLACK = 2.0 / CLOCK_TICKS


class _Seen:
    """What StepProcs remembers of one process between samples."""

    __slots__ = ("earlier", "group", "latest", "latest_t", "own", "parent", "read_t", "reaped", "transfer")

    def __init__(self, group: object, parent: tuple[int, int] | None) -> None:
        self.group = group
        self.parent = parent  # (pid, start) of its parent when last read, None outside the step's tree
        self.own = 0.0  # last own CPU seconds (utime + stime)
        self.reaped = 0.0  # last cutime + cstime
        self.read_t = 0.0  # when those were read (unix seconds)
        self.transfer = 0.0  # the part of `reaped` already counted for another group (a rank it reaped)
        self.earlier = 0.0  # CPU seconds it had when it moved into its group (an exec that set RANK)
        # Its total as read between samples (StepProcs.watch), kept apart: the sample's accounting compares a
        # reaper's cutime with its value at the previous sample, whatever was read in between.
        self.latest = 0.0
        self.latest_t = 0.0

    @property
    def total(self) -> float:
        return self.own + self.reaped

    def counted(self) -> float:
        """What it adds to its group now."""
        return self.own + self.reaped - self.transfer - self.earlier


class _RankLife:
    """One rank across samples: its main process, when its program started and ended, where its CPU total rests."""

    __slots__ = ("cgroup", "cgroup_cpu", "cgroup_peak", "cores", "ended", "exact_end", "hwm", "key", "local_rank",
                 "started")

    def __init__(self) -> None:
        self.key: tuple[int, int] | None = None  # its main process (pid, start)
        self.local_rank: int | None = None
        self.cores = 0
        self.started: float | None = None  # unix seconds its program started (exec), to a scan's precision
        self.ended: float | None = None  # unix seconds its main process ended; None while it runs
        self.exact_end = False  # the CPU total at `ended` is the kernel's final one
        self.hwm = 0  # the largest VmHWM of its main process (bytes)
        self.cgroup: tuple[str, ...] | None = None  # its Slurm task cgroup, where it has one of its own
        self.cgroup_cpu: float | None = None  # that cgroup's CPU seconds and peak memory, last read
        self.cgroup_peak: int | None = None


class StepProcs:
    """The step's processes on this node, sampled again and again; it remembers what it needs between
    samples: every process's last CPU seconds, parent and group (to count a process that ended exactly, and
    once), and every rank seen (a rank whose processes have all ended is still reported, with its CPU seconds)."""

    def __init__(self, step_pid: int, proc_root: str = PROC, skip: int | None = None) -> None:
        """`skip`: a process not to count, with its descendants (the sampler, started inside a task)."""
        self.step_pid = step_pid
        self.proc_root = proc_root
        self.skip = skip
        self._outside: set[int] = set()  # pids of processes seen outside the step: not read again until a full scan
        self._scans = 0
        self._seen: dict[tuple[int, int], _Seen] = {}  # (pid, start) -> what it used, and where
        self._gone: dict[object, float] = {}  # group -> CPU seconds of its processes that have ended
        self._ranks: dict[int, _RankLife] = {}
        self._environ: dict[tuple[int, int, str], tuple[int | None, int | None]] = {}
        # (pid, start) -> (final total, when it ended, whether that total is the kernel's final one, the final
        # cutime + cstime within it where it was read)
        self._exits: dict[tuple[int, int], tuple[float, float, bool, float | None]] = {}
        self._last_t: float | None = None  # when the previous scan ran
        # The sampler starts beside the task's first process, before the container's program: a rank seen by
        # the first scan already running its program began it after this (its fork came earlier, in the
        # container's start-up).
        self._created = time.time()
        self.cgroup_root = CGROUP_ROOT
        self._cgroups_seen: dict[int, tuple[str, ...] | None] = {}  # rank -> its main's task cgroup, read once

    def step_processes(self) -> dict[int, Stat]:
        """The stat of every descendant of the step's pid, read now, parents before their children.

        Only the step's processes are parsed in full; the others are read for their parent pid, and not
        again until the next full scan (every FULL_SCAN_EVERY samples): a process outside the step never
        moves into it (an orphan's new parent is an ancestor or init), only a new process that gets the
        pid of one that ended could, and pids are handed out in turn up to pid_max."""
        full = self._scans % FULL_SCAN_EVERY == 0
        self._scans += 1
        listed = list_pids(self.proc_root)
        outside = set() if full else self._outside & set(listed)
        texts: dict[int, str] = {}
        parents: dict[int, int] = {}
        for pid in listed:
            if pid in outside:
                continue
            data = _read(f"{self.proc_root}/{pid}/stat", 4096)
            if data is None:
                continue
            text = data.decode("utf-8", "replace")
            ppid = parse_ppid(text)
            if ppid is not None:
                texts[pid], parents[pid] = text, ppid
        stats: dict[int, Stat] = {}
        for pid in descendants(self.step_pid, parents, self.skip):
            stat = parse_stat(texts.pop(pid))
            if stat is not None:
                stats[pid] = stat
        self._outside = outside.union(texts)
        return stats

    def _rank_of(self, pid: int, stat: Stat) -> tuple[int | None, int | None]:
        # The environment is read once per process image: a process gets a new one only by exec, which
        # changes its command name (a shim that execs apptainer that execs python is three images).
        # Nothing is kept from a read that found no environment at all: a process in the middle of its exec
        # shows an empty one for a moment, and keeping that would make a rank a launcher process for good.
        key = (pid, stat.start, stat.comm)
        known = self._environ.get(key)
        if known is not None:
            return known
        data = _read(f"{self.proc_root}/{pid}/environ", 1 << 20)
        if not data:
            return None, None
        values = parse_environ(data, ("RANK", "LOCAL_RANK"))
        found = self._environ[key] = (_int_or_none(values.get("RANK")), _int_or_none(values.get("LOCAL_RANK")))
        return found

    def rank_mains(self) -> list[tuple[int, int]]:
        """(pid, start) of each rank's main process still running: what the sampler watches for its exit."""
        return [life.key for life in self._ranks.values() if life.key is not None and life.ended is None]

    def running_ranks(self) -> list[tuple[int, int]]:
        """The rank main processes not known to have ended (read by the last sample or by watch since)."""
        return [key for key in self.rank_mains() if key not in self._exits]

    def watch(self, key: tuple[int, int], now: float) -> bool:
        """Read a rank's main process now (the sampler does between samples); True when it has ended. An ended
        process read before its reaper took it (a zombie) leaves its final CPU seconds, the kernel's own; one
        already reaped leaves the growth of its reaper's cutime + cstime when it was the reaper's only child of
        the step to go, else nothing (its last read stands)."""
        seen = self._seen.get(key)
        if seen is None or key in self._exits:
            return key in self._exits
        stat = read_stat(key[0], self.proc_root)
        if stat is not None and stat.start == key[1]:
            if stat.state not in ("Z", "X"):
                seen.latest, seen.latest_t = stat.total_s, now
                return False
            self._exits[key] = (stat.total_s, now, True, stat.reaped_s)
            return True
        parent_key = seen.parent
        parent = self._seen.get(parent_key) if parent_key is not None else None
        parent_stat = read_stat(parent_key[0], self.proc_root) if parent_key is not None else None
        if parent is not None and parent_stat is not None and parent_key is not None \
                and parent_stat.start == parent_key[1]:
            siblings_gone = [other for other, entry in self._seen.items()
                             if entry.parent == parent_key and other != key and other not in self._exits
                             and read_stat(other[0], self.proc_root) is None]
            grown = parent_stat.reaped_s - parent.reaped
            if not siblings_gone and grown >= seen.total - _TICK_SLACK:
                self._exits[key] = (max(grown, seen.total), now, True, None)
                return True
        if seen.latest_t > seen.read_t:  # missed: its last read, and when
            self._exits[key] = (max(seen.total, seen.latest), seen.latest_t, False, None)
        else:
            self._exits[key] = (seen.total, seen.read_t or now, False, None)
        return True

    def sample(self, now: float | None = None) -> tuple[list[dict[str, object]], dict[str, object]]:
        """(ranks, launcher) as record.md describes them, ranks ordered by rank."""
        now = time.time() if now is None else now
        procs = self.step_processes()
        uptime = read_uptime(self.proc_root)
        own = {pid: self._rank_of(pid, stat) for pid, stat in procs.items()}
        group: dict[int, object] = {}  # pid -> its rank, or LAUNCHER
        main: dict[int, int] = {}  # pid -> the main process of its rank
        for pid, stat in procs.items():  # parents first
            rank, ppid = own[pid][0], stat.ppid
            if rank is None:
                group[pid] = group.get(ppid, LAUNCHER)
                if ppid in main:
                    main[pid] = main[ppid]
            else:
                group[pid] = rank
                main[pid] = main[ppid] if ppid in main and own[ppid][0] == rank else pid
        live = {(pid, stat.start) for pid, stat in procs.items()}
        self._account_gone(live, procs, now)

        moved_in: dict[tuple[int, int], float] = {}  # a process that moved into a rank now: its previous read time
        for pid, stat in procs.items():
            key = (pid, stat.start)
            parent = (stat.ppid, procs[stat.ppid].start) if stat.ppid in procs else None
            seen = self._seen.get(key)
            if seen is None:
                seen = self._seen[key] = _Seen(group[pid], parent)
            elif seen.group != group[pid]:
                # An exec set or dropped RANK since the last read: what it used until then stays with its old group.
                self._gone[seen.group] = self._gone.get(seen.group, 0.0) + seen.counted()
                seen.group, seen.earlier, seen.transfer = group[pid], seen.total, 0.0
                moved_in[key] = seen.read_t
            seen.parent = parent
            seen.own, seen.reaped, seen.read_t = stat.cpu_s, stat.reaped_s, now
            if stat.state in ("Z", "X") and key not in self._exits:
                self._exits[key] = (stat.total_s, now, True, stat.reaped_s)  # a zombie shows its final times until it is reaped
        self._environ = {key: value for key, value in self._environ.items() if key[:2] in live}

        totals: dict[object, dict[str, float]] = {}
        for pid, stat in procs.items():
            seen = self._seen[(pid, stat.start)]
            entry = totals.setdefault(group[pid], _new_group())
            entry["procs"] += 1
            entry["threads"] += stat.threads
            entry["cpu_s"] += seen.counted()
            entry["rss"] += stat.rss

        roots: dict[int, int] = {}  # rank -> main process; the earliest started should two subtrees share a RANK
        for pid, root in main.items():
            of = group[pid]
            if pid == root and isinstance(of, int) and (of not in roots or procs[pid].start < procs[roots[of]].start):
                roots[of] = pid
        for rank, root in roots.items():
            stat = procs[root]
            key = (root, stat.start)
            life = self._ranks.get(rank)
            if life is None:
                life = self._ranks[rank] = _RankLife()
            if life.key != key:  # its first main process, or a restarted one
                if key in moved_in and self._last_t is not None:
                    begun = moved_in[key] or self._last_t  # its exec came after its last read without RANK
                else:
                    begun = _started_at(stat.start, uptime, now)
                    if self._last_t is None:
                        begun = min(now, max(begun, self._created))
                life.started = begun if life.started is None else min(life.started, begun)
                life.key, life.ended, life.exact_end = key, None, False
            cpus, peak = read_status(root, self.proc_root)
            life.local_rank, life.cores = own[root][1], len(cpus)
            life.hwm = max(life.hwm, peak or 0)
            if rank not in self._cgroups_seen or life.key != key:
                self._cgroups_seen[rank] = task_cgroup(root, self.proc_root, self.cgroup_root)
        self._read_task_cgroups()
        for life in self._ranks.values():
            if life.key is not None and life.ended is None and life.key in self._exits:  # a zombie now
                _, life.ended, life.exact_end, _ = self._exits[life.key]
        self._exits = {key: value for key, value in self._exits.items() if key in live}
        self._last_t = now
        ranks = []
        for rank in sorted(self._ranks):
            life = self._ranks[rank]
            counts = _counts(totals.get(rank), self._gone.get(rank, 0.0), threads=True)
            running = life.key is not None and life.key in live and life.key not in self._exits
            ranks.append({"rank": rank, "local_rank": life.local_rank,
                          "pid": life.key[0] if life.key is not None else None, "cores": life.cores, **counts,
                          "hwm": life.hwm, "started": _round_t(life.started), "ended": _round_t(life.ended),
                          "cgroup_cpu_s": None if life.cgroup_cpu is None else round(life.cgroup_cpu, 3),
                          "cgroup_peak": life.cgroup_peak,
                          "cpu_source": RUNNING if running else AT_EXIT if life.exact_end else LAST_READ})
        return ranks, _counts(totals.get(LAUNCHER), self._gone.get(LAUNCHER, 0.0), threads=False)

    def _read_task_cgroups(self) -> None:
        """Each rank with a Slurm task cgroup of its own (srun starts one rank per task; under torchrun the ranks
        share the task's, which then says nothing of one rank) gets that cgroup's CPU seconds and peak memory.
        The cgroup holds the task's launcher too (the shim, apptainer's starter) and, for the node's first task,
        this sampler: its own CPU seconds are taken off."""
        shared: dict[tuple[str, ...], int] = {}
        for found in self._cgroups_seen.values():
            if found is not None:
                shared[found] = shared.get(found, 0) + 1
        own = task_cgroup(os.getpid(), self.proc_root, self.cgroup_root)
        for rank, found in self._cgroups_seen.items():
            life = self._ranks.get(rank)
            if life is None or found is None or shared.get(found, 0) > 1:
                if life is not None:
                    life.cgroup = None
                continue
            cpu, peak = read_cgroup_usage(found)
            if cpu is not None and found == own:
                times = os.times()
                cpu = max(0.0, cpu - (times.user + times.system + times.children_user + times.children_system))
            life.cgroup = found
            life.cgroup_cpu = cpu if cpu is not None else life.cgroup_cpu
            life.cgroup_peak = max(life.cgroup_peak or 0, peak) if peak is not None else life.cgroup_peak

    def _account_gone(self, live: set[tuple[int, int]], procs: dict[int, Stat], now: float) -> None:
        """Count once, for its group, the final CPU seconds of every process that has gone since the last scan.

        A gone process is covered by its reaper (its parent when last read) when the reaper's cutime + cstime
        grew by its final total: read now for a reaper still running, from the reaper's own final read for one
        that has gone too. A covered process adds nothing itself where its reaper is of its group (the reaper's
        count holds it); otherwise it adds its final total to its group and the reaper gives that much up.
        Children are settled before their reapers, so a reaper gives up what its gone children took."""
        gone = [key for key in self._seen if key not in live]
        if not gone:
            return
        gone_set = set(gone)
        finals: dict[tuple[int, int], float] = {}
        for key in gone:
            known = self._exits.get(key)
            finals[key] = known[0] if known is not None else self._seen[key].total
        children: dict[tuple[int, int], list[tuple[int, int]]] = {}
        for key in gone:
            reaper_key = self._seen[key].parent
            if reaper_key is not None:
                children.setdefault(reaper_key, []).append(key)
        growth: dict[tuple[int, int], float] = {}
        for reaper_key, keys in children.items():
            reaper = self._seen.get(reaper_key)
            if reaper is None:
                continue
            if reaper_key in live:
                grown = procs[reaper_key[0]].reaped_s - reaper.reaped
                known = self._exits.get(keys[0])
                if len(keys) == 1 and grown >= finals[keys[0]] - _TICK_SLACK and (known is None or not known[2]):
                    # its only child to go: the growth is that child's final total, to the tick
                    finals[keys[0]] = grown
                    self._exits[keys[0]] = (grown, known[1] if known is not None else now, True, None)
            elif reaper_key in gone_set:
                known = self._exits.get(reaper_key)
                if known is None or not known[2]:
                    continue  # its last read came before it took them
                grown = known[3] - reaper.reaped if known[3] is not None else known[0] - reaper.total
            else:
                continue
            growth[reaper_key] = grown

        def depth(key: tuple[int, int]) -> int:
            count = 0
            parent = self._seen[key].parent
            while parent in gone_set and count < len(gone):
                count += 1
                parent = self._seen[parent].parent if parent is not None else None
            return count

        for key in sorted(gone, key=depth, reverse=True):
            seen = self._seen[key]
            known = self._exits.get(key)
            for life in self._ranks.values():
                if life.key == key and (life.ended is None or not life.exact_end):
                    life.ended = known[1] if known is not None else seen.read_t
                    life.exact_end = known is not None and known[2]
            reaper_key = seen.parent
            reaper = self._seen.get(reaper_key) if reaper_key is not None else None
            covered = reaper is not None and reaper_key in growth and \
                growth[reaper_key] >= finals[key] - _TICK_SLACK
            if reaper is not None and reaper_key is not None and covered:
                growth[reaper_key] -= finals[key]
            if reaper is not None and covered and reaper.group == seen.group:
                reaper.transfer += seen.transfer + seen.earlier
            else:
                self._gone[seen.group] = self._gone.get(seen.group, 0.0) + finals[key] - seen.transfer - seen.earlier
                if reaper is not None and covered:
                    reaper.transfer += finals[key]
        for key in gone:
            del self._seen[key]


def _started_at(start_ticks: int, uptime: float | None, now: float) -> float:
    """Unix seconds a process started: its age is the time since boot less its start (clock ticks after boot)."""
    if uptime is None:
        return now
    return now - max(0.0, uptime - start_ticks / CLOCK_TICKS)


def _round_t(t: float | None) -> float | None:
    return None if t is None else round(t, 3)


def _new_group() -> dict[str, float]:
    return {"procs": 0, "threads": 0, "cpu_s": 0.0, "rss": 0}


def _counts(entry: dict[str, float] | None, gone_cpu_s: float, *, threads: bool) -> dict[str, object]:
    entry = entry or _new_group()
    counts: dict[str, object] = {"procs": int(entry["procs"])}
    if threads:
        counts["threads"] = int(entry["threads"])
    counts["cpu_s"] = round(entry["cpu_s"] + gone_cpu_s, 2)
    counts["rss"] = int(entry["rss"])
    return counts
