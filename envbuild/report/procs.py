"""What the processes of one step on this node use of the CPUs and memory, read from /proc.

The sampler (sampler.py) runs beside the training processes with `python -S`, so this module is stdlib
only and reads /proc with plain os calls: every open costs the node's cores a little, every sample.

The step's processes are the descendants of the step's pid (slurmstepd: its children are the step's
tasks on this node), found from the parent pid of every process on the node. They are grouped into
ranks by the RANK in their environment (record.md): a process belongs to the rank of its nearest
ancestor-or-self that has RANK, so DataLoader workers, which inherit RANK, and helper processes started
with a cleaned environment both count for their rank; the rank's main process is the highest ancestor
with the same RANK value. Processes under no RANK are the launcher (torchrun, shims, apptainer).

A process's CPU time vanishes from /proc with it, so StepProcs remembers the last CPU seconds of every
process it saw and keeps them in its group's total after the process has gone: a rank's cpu_s only
grows, also when its DataLoader workers are restarted every epoch.
"""

from __future__ import annotations

import os

PROC = "/proc"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096

LAUNCHER = "launcher"  # the group of the step's processes without a rank
FULL_SCAN_EVERY = 10  # samples: every tenth reads every process of the node again (see StepProcs.step_processes)


class Stat:
    """The fields of /proc/PID/stat the report uses. `start` (clock ticks after boot) tells a process
    from a later one that got the same pid; `comm` changes when the process execs."""

    __slots__ = ("comm", "cpu_s", "ppid", "rss", "start", "state", "threads")

    def __init__(self, comm: str, state: str, ppid: int, cpu_s: float, threads: int, start: int, rss: int) -> None:
        self.comm = comm
        self.state = state
        self.ppid = ppid
        self.cpu_s = cpu_s
        self.threads = threads
        self.start = start
        self.rss = rss


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


def _new_group() -> dict[str, float]:
    return {"procs": 0, "threads": 0, "cpu_s": 0.0, "rss": 0}


class _Seen:
    """What StepProcs remembers of one process: its group, its last CPU seconds, and the part of those
    counted for a group it left (an exec that set or dropped RANK)."""

    __slots__ = ("cpu_s", "earlier", "group")

    def __init__(self, group: object, cpu_s: float) -> None:
        self.group = group
        self.cpu_s = cpu_s
        self.earlier = 0.0


class StepProcs:
    """The step's processes on this node, sampled again and again; it remembers what it needs between
    samples: every process's last CPU seconds and group (to keep the CPU time of processes that exited),
    and every rank seen (a rank whose processes have all ended is still reported, with its CPU seconds)."""

    def __init__(self, step_pid: int, proc_root: str = PROC, skip: int | None = None) -> None:
        """`skip`: a process not to count, with its descendants (the sampler, started inside a task)."""
        self.step_pid = step_pid
        self.proc_root = proc_root
        self.skip = skip
        self._outside: set[int] = set()  # pids of processes seen outside the step: not read again until a full scan
        self._scans = 0
        self._seen: dict[tuple[int, int], _Seen] = {}  # (pid, start) -> what it used, and where
        self._gone: dict[object, float] = {}  # group -> CPU seconds of processes that have left it
        self._ranks: dict[int, dict[str, object]] = {}  # rank -> local_rank, pid and cores last seen
        self._environ: dict[tuple[int, int, str], tuple[int | None, int | None]] = {}

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
        key = (pid, stat.start, stat.comm)
        if key not in self._environ:
            self._environ[key] = read_rank(pid, self.proc_root)
        return self._environ[key]

    def sample(self) -> tuple[list[dict[str, object]], dict[str, object]]:
        """(ranks, launcher) as record.md describes them, ranks ordered by rank."""
        procs = self.step_processes()
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

        totals: dict[object, dict[str, float]] = {}
        live: set[tuple[int, int]] = set()
        for pid, stat in procs.items():
            key = (pid, stat.start)
            live.add(key)
            seen = self._seen.get(key)
            if seen is None:
                seen = self._seen[key] = _Seen(group[pid], stat.cpu_s)
            elif seen.group != group[pid]:
                self._gone[seen.group] = self._gone.get(seen.group, 0.0) + seen.cpu_s - seen.earlier
                seen.group, seen.earlier = group[pid], seen.cpu_s
            seen.cpu_s = stat.cpu_s
            entry = totals.setdefault(group[pid], _new_group())
            entry["procs"] += 1
            entry["threads"] += stat.threads
            entry["cpu_s"] += stat.cpu_s - seen.earlier
            entry["rss"] += stat.rss
        for key in [key for key in self._seen if key not in live]:
            seen = self._seen.pop(key)
            self._gone[seen.group] = self._gone.get(seen.group, 0.0) + seen.cpu_s - seen.earlier
        self._environ = {key: value for key, value in self._environ.items() if key[:2] in live}

        roots: dict[int, int] = {}  # rank -> main process; the earliest started should two subtrees share a RANK
        for pid, root in main.items():
            of = group[pid]
            if pid == root and isinstance(of, int) and (of not in roots or procs[pid].start < procs[roots[of]].start):
                roots[of] = pid
        for rank, root in roots.items():
            self._ranks[rank] = {"rank": rank, "local_rank": own[root][1], "pid": root,
                                 "cores": len(read_allowed_cpus(root, self.proc_root))}
        ranks = [{**self._ranks[rank], **_counts(totals.get(rank), self._gone.get(rank, 0.0), threads=True)}
                 for rank in sorted(self._ranks)]
        return ranks, _counts(totals.get(LAUNCHER), self._gone.get(LAUNCHER, 0.0), threads=False)


def _counts(entry: dict[str, float] | None, gone_cpu_s: float, *, threads: bool) -> dict[str, object]:
    entry = entry or _new_group()
    counts: dict[str, object] = {"procs": int(entry["procs"])}
    if threads:
        counts["threads"] = int(entry["threads"])
    counts["cpu_s"] = round(entry["cpu_s"] + gone_cpu_s, 2)
    counts["rss"] = int(entry["rss"])
    return counts
