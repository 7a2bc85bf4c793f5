"""What the Slurm cluster this runs on says about itself, now: its partitions (time limits, nodes) and its nodes
(CPUs, memory, GPUs, features), read with `scontrol show partition|node --oneliner`, and what `sbatch --test-only`
says of a script. `envrun sbatch --check` checks a script against these facts where it runs on the cluster the
script is for (envbuild.commands.sbatch decides that); the rules that judge them are pure
(envbuild.slurm.check.jobrules, `cluster_*`) and get the facts as data.

`scontrol show ... --oneliner` prints one `Key=Value ...` line per entity in every Slurm release the sites run
(scontrol(1)); its JSON form needs a newer Slurm than some sites have (22.05 here), so the key=value form is read.
A value may hold spaces (`OS=Linux 6.1 #1 SMP`): a value runs up to the next ` Key=`. Without Slurm (a laptop) or
when it does not answer within SCONTROL_TIMEOUT_S, there are no facts and the caller says so.

The Slurm release (`scontrol --version`) decides rules whose behaviour changed between releases (srun's
--cpus-per-task, envbuild.slurm.check.steprules.srun_inherits). The user's accounts come from accounting
(`sacctmgr show assoc`, associations_from), which a cluster may not run (no slurmdbd): then they are unknown,
and the check says so rather than calling an account valid.

read_live_cluster asks all of these at once (ask_at_once), so a slow controller costs the slowest query rather
than their sum, and a controller that cannot be reached (`scontrol ping` finds it DOWN at once, where the other
commands retry for seconds first) costs one wait, after which the queries still running are stopped. What each
command said is read by a function of its answer (version_from, associations_from, enforcement_from,
test_only_from), which a test gives recorded answers.
"""

from __future__ import annotations

import queue
import re
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from envbuild.shared.durations import parse_slurm_time
from envbuild.shared.errors import UsageError
from envbuild.shared.versionnumbers import release_in, version_word

SCONTROL_TIMEOUT_S = 15  # slurmctld answers in well under a second; a hung one must not hang the check
TEST_ONLY_TIMEOUT_S = 30
SACCTMGR_TIMEOUT_S = 15  # slurmdbd may be down or far away: sacctmgr then waits on its connection
_KEY = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z0-9_:/.]*)=")
_GPU_GRES = re.compile(r"(?:^|,)gpu(?::([^:,(]+))?:(\d+)")
# What starts a query's process: subprocess.Popen, or a test's stand-in with its communicate, kill and returncode
Starter = Callable[..., Any]


@dataclass(frozen=True)
class PartitionFacts:
    name: str
    max_time_s: int | None  # None: UNLIMITED
    default_time_s: int | None
    max_nodes: int | None  # None: UNLIMITED
    nodes: tuple[str, ...]  # the node names (expanded)
    state: str
    default: bool


@dataclass(frozen=True)
class NodeFacts:
    name: str
    cpus: int | None
    memory_mb: int | None
    gpus: int  # from its Gres (gpu[:type]:N), 0 without
    gpu_type: str | None
    features: tuple[str, ...]
    cores: int | None = None  # physical cores: Sockets x CoresPerSocket (CPUTot counts hardware threads too)


@dataclass(frozen=True)
class ClusterFacts:
    """The cluster as scontrol described it at `read_at` (an ISO time, for the findings' sources)."""

    name: str
    read_at: str
    partitions: dict[str, PartitionFacts] = field(default_factory=dict)
    nodes: dict[str, NodeFacts] = field(default_factory=dict)
    slurm_version: str = ""  # as `scontrol --version` prints it (22.05.8); "" where it did not say
    associations: Associations | None = None  # the user's accounts (associations_from); None: not asked

    @property
    def source(self) -> str:
        return f"scontrol show partition/node on {self.name or 'this cluster'}, {self.read_at}"

    @property
    def version_source(self) -> str:
        return f"scontrol --version on {self.name or 'this cluster'}, {self.read_at}"

    def release(self) -> tuple[int, int] | None:
        """The Slurm release (major, minor): (22, 5) for 22.05.8; None where unknown."""
        return slurm_release(self.slurm_version)

    def default_partition(self) -> PartitionFacts | None:
        return next((partition for partition in self.partitions.values() if partition.default), None)

    def nodes_of(self, partition: PartitionFacts) -> list[NodeFacts]:
        return [self.nodes[name] for name in partition.nodes if name in self.nodes]


# The AccountingStorageEnforce words that make sbatch refuse a job without an association (slurm.conf(5): "If
# limits, qos, or wckeys are set, associations will automatically be set. If safe is set, limits and associations
# will automatically be set"; all sets them all)
ENFORCING_ASSOCIATIONS = frozenset({"associations", "limits", "qos", "wckeys", "safe", "all"})


@dataclass(frozen=True)
class Associations:
    """What accounting says of the user's associations now (`sacctmgr show assoc user=USER`): the accounts they
    may charge, each with the partition it is limited to ("" for any). `answered` False: accounting did not
    answer (no slurmdbd, sacctmgr missing or hung) and `why` says what it said; nothing is known then."""

    user: str
    read_at: str
    answered: bool
    pairs: tuple[tuple[str, str], ...] = ()  # (account, partition), lower case as slurmdbd stores them
    why: str = ""
    enforce: str = ""  # AccountingStorageEnforce as `scontrol show config` prints it (enforcement_from); "": unknown

    def enforced(self) -> bool | None:
        """Whether sbatch refuses a job charged to an account the user has no association with: slurm.conf(5)'s
        AccountingStorageEnforce names associations, or limits, qos, wckeys, safe or all, which each set it;
        None where the setting is not known."""
        if not self.enforce:
            return None
        words = {word.strip().lower() for word in self.enforce.split(",")}
        return bool(words & ENFORCING_ASSOCIATIONS)

    @property
    def source(self) -> str:
        return f"sacctmgr show assoc user={self.user}, {self.read_at}"

    def accounts(self) -> list[str]:
        return sorted({account for account, _partition in self.pairs})

    def partitions_of(self, account: str) -> list[str] | None:
        """The partitions `account` is limited to for this user; None: any partition (or no such account)."""
        limited = [partition for name, partition in self.pairs if name == account.lower()]
        return None if not limited or "" in limited else sorted(set(limited))


def slurm_release(version: str) -> tuple[int, int] | None:
    """(major, minor) of a Slurm version as its tools print it ("slurm 23.11.4", "slurm-wlm 22.05.8", "24.05")."""
    numbers = release_in(version)
    return (numbers[0], numbers[1]) if numbers is not None and len(numbers) >= 2 else None


def parse_oneliners(text: str) -> list[dict[str, str]]:
    """Each line of `scontrol show ... --oneliner` as its Key=Value pairs."""
    entities: list[dict[str, str]] = []
    for line in text.splitlines():
        keys = list(_KEY.finditer(line))
        if not keys:
            continue
        entity: dict[str, str] = {}
        for index, match in enumerate(keys):
            end = keys[index + 1].start() if index + 1 < len(keys) else len(line)
            entity[match.group(1)] = line[match.end():end].strip()
        entities.append(entity)
    return entities


def expand_hostlist(text: str) -> tuple[str, ...]:
    """Slurm's host list `n[001-003,007],g1` as its names (what `scontrol show hostnames` prints)."""
    names: list[str] = []
    for part in re.findall(r"[^,\[]+(?:\[[^\]]*\])?[^,]*", text):
        match = re.fullmatch(r"([^\[]*)\[([^\]]*)\](.*)", part)
        if match is None:
            if part and part != "(null)":
                names.append(part)
            continue
        head, ranges, tail = match.groups()
        for item in ranges.split(","):
            low, dash, high = item.partition("-")
            if dash and low.isdigit() and high.isdigit():
                names += [f"{head}{number:0{len(low)}d}{tail}" for number in range(int(low), int(high) + 1)]
            elif item:
                names.append(f"{head}{item}{tail}")
    return tuple(names)


def _time(value: str | None) -> int | None:
    if not value or value.upper() in ("UNLIMITED", "INFINITE", "NONE"):
        return None
    try:
        return parse_slurm_time(value, "MaxTime", allow_zero=True)
    except UsageError:
        return None


def _int(value: str | None) -> int | None:
    return int(value) if value and value.isdigit() else None


def parse_partitions(text: str) -> dict[str, PartitionFacts]:
    found: dict[str, PartitionFacts] = {}
    for entity in parse_oneliners(text):
        name = entity.get("PartitionName")
        if not name:
            continue
        found[name] = PartitionFacts(name=name, max_time_s=_time(entity.get("MaxTime")),
                                     default_time_s=_time(entity.get("DefaultTime")),
                                     max_nodes=_int(entity.get("MaxNodes")),
                                     nodes=expand_hostlist(entity.get("Nodes", "")), state=entity.get("State", ""),
                                     default=entity.get("Default", "").upper() == "YES")
    return found


def parse_nodes(text: str) -> dict[str, NodeFacts]:
    found: dict[str, NodeFacts] = {}
    for entity in parse_oneliners(text):
        name = entity.get("NodeName")
        if not name:
            continue
        gpus, gpu_type = 0, None
        for match in _GPU_GRES.finditer(entity.get("Gres", "")):
            gpus += int(match.group(2))
            gpu_type = gpu_type or match.group(1)
        features = entity.get("AvailableFeatures", "")
        sockets, per_socket = _int(entity.get("Sockets")), _int(entity.get("CoresPerSocket"))
        found[name] = NodeFacts(name=name, cpus=_int(entity.get("CPUTot")), memory_mb=_int(entity.get("RealMemory")),
                                gpus=gpus, gpu_type=gpu_type,
                                features=tuple(f for f in features.split(",") if f and f != "(null)"),
                                cores=sockets * per_socket if sockets and per_socket else None)
    return found


@dataclass(frozen=True)
class LiveCluster:
    """What the Slurm here said (read_live_cluster): the cluster's facts, or None and `why` there are none; and
    where a script was given, what `sbatch --test-only` said of it (exit status, message), None where it gave no
    answer (`test_only_why` says why)."""

    facts: ClusterFacts | None
    why: str = ""
    test_only: tuple[int, str] | None = None
    test_only_why: str = ""


def read_live_cluster(name: str, user: str = "", script: str | None = None, cwd: str | None = None,
                      start: Starter = subprocess.Popen) -> LiveCluster:
    """What the Slurm here says now: the facts of the cluster scontrol answers for (named `name` by the caller:
    its ClusterName) and its release, `user`'s associations where accounting answers (with the
    AccountingStorageEnforce that decides whether sbatch refuses an account without one), and given a `script`,
    what `sbatch --test-only` says of it, run in `cwd` (where the job would start). The queries run at once
    (ask_at_once): a slow controller costs the slowest of them, not their sum, and one that cannot be reached
    costs one wait, which `why` states."""
    queries = {
        "ping": Query(("scontrol", "ping"), SCONTROL_TIMEOUT_S),
        "partition": Query(("scontrol", "show", "partition", "--oneliner"), SCONTROL_TIMEOUT_S),
        "node": Query(("scontrol", "show", "node", "--oneliner"), SCONTROL_TIMEOUT_S),
        "version": Query(("scontrol", "--version"), SCONTROL_TIMEOUT_S, controller=False),
    }
    if user:
        queries["config"] = Query(("scontrol", "show", "config"), SCONTROL_TIMEOUT_S)
        queries["assoc"] = Query(("sacctmgr", "-nP", "show", "assoc", f"user={user}",
                                  *([f"cluster={name}"] if name else []), "format=account,partition"),
                                 SACCTMGR_TIMEOUT_S, controller=False)
    if script is not None:
        queries["test_only"] = Query(("sbatch", "--test-only"), TEST_ONLY_TIMEOUT_S, input=script, cwd=cwd)
    read_at = time.strftime("%Y-%m-%dT%H:%M")
    asked = ask_at_once(queries, start)
    for what in ("partition", "node"):
        answer = asked.answers[what]
        if answer.returncode == 0:
            continue
        if asked.unreachable:
            waited = "under 0.1 s" if asked.waited_s < 0.05 else f"{asked.waited_s:.1f} s"
            return LiveCluster(None, f"no Slurm answered in {waited}: {asked.unreachable}")
        return LiveCluster(None, f"no Slurm answered here: {queries[what].text()}: {answer.said()}")
    facts = ClusterFacts(name=name, read_at=read_at, partitions=parse_partitions(asked.answers["partition"].stdout),
                         nodes=parse_nodes(asked.answers["node"].stdout),
                         slurm_version=version_from(asked.answers["version"]))
    if user:
        associations = associations_from(user, read_at, asked.answers["assoc"])
        if associations.answered:  # whether sbatch refuses an account without an association
            associations = replace(associations, enforce=enforcement_from(asked.answers["config"]))
        facts = replace(facts, associations=associations)
    test_only = asked.answers.get("test_only")
    if test_only is None:
        return LiveCluster(facts)
    return LiveCluster(facts, test_only=test_only_from(test_only), test_only_why=test_only.why)


def version_from(answer: Answer) -> str:
    """The version `scontrol --version` printed ("22.05.8"); "" where it did not answer."""
    return version_word(answer.stdout) if answer.returncode == 0 else ""


def associations_from(user: str, read_at: str, answer: Answer) -> Associations:
    """The user's associations from what `sacctmgr -nP show assoc ... format=account,partition` said (one
    `account|partition` line each); answered False, with what sacctmgr said, where accounting did not answer."""
    if answer.returncode is None:
        return Associations(user, read_at, answered=False, why=answer.why)
    if answer.returncode != 0:
        said = answer.output()
        return Associations(user, read_at, answered=False,
                            why=f"sacctmgr: {said}" if said else f"sacctmgr exit status {answer.returncode}")
    return Associations(user, read_at, answered=True, pairs=parse_associations(answer.stdout))


def enforcement_from(answer: Answer) -> str:
    """AccountingStorageEnforce as `scontrol show config` printed it ("associations,limits,qos,safe", "none"); ""
    where scontrol did not answer or did not say."""
    if answer.returncode != 0:
        return ""
    for line in answer.stdout.splitlines():
        key, equals, value = line.partition("=")
        if equals and key.strip() == "AccountingStorageEnforce":
            return value.strip()
    return ""


def parse_associations(text: str) -> tuple[tuple[str, str], ...]:
    """`sacctmgr -nP ... format=account,partition` lines as (account, partition) pairs, lower case."""
    pairs: list[tuple[str, str]] = []
    for line in text.splitlines():
        account, _bar, partition = line.strip().partition("|")
        if account:
            pairs.append((account.lower(), partition.strip().lower()))
    return tuple(dict.fromkeys(pairs))


def test_only_from(answer: Answer) -> tuple[int, str] | None:
    """What `sbatch --test-only` said of the script (its exit status and message: where and when the job would
    start, or why Slurm refuses it); the script went on sbatch's standard input, so nothing was written. None
    where sbatch is missing or did not answer."""
    return None if answer.returncode is None else (answer.returncode, answer.output())


# --- asking Slurm's commands at once ------------------------------------------------------------------------------

# What scontrol and sbatch print where the controller cannot be reached: the connection failed (after their own
# retries), or the controller took the request and never answered
_UNREACHABLE = ("unable to contact slurm controller", "socket timed out on send/recv")
# The collector waits this long past the longest query's own timeout: each query's thread ends its process at that
# timeout, the margin only lets the thread report it
_DEADLINE_MARGIN_S = 1.0
# How long the threads of stopped queries get to report (a killed process's pipes close at once): they reap them
_REAP_S = 1.0


@dataclass(frozen=True)
class Query:
    """One Slurm command to ask, ended after `timeout_s`. `controller`: it asks slurmctld, so a controller that
    cannot be reached shows in its answer (`scontrol --version` answers by itself; sacctmgr asks slurmdbd)."""

    argv: tuple[str, ...]
    timeout_s: float
    controller: bool = True
    input: str | None = None  # its standard input (sbatch --test-only reads the script there)
    cwd: str | None = None

    def text(self) -> str:
        return " ".join(self.argv)


@dataclass(frozen=True)
class Answer:
    """What a query's command said: its exit status and output; returncode None where there is no answer (the
    program is missing, it timed out or was stopped), and `why` says which."""

    returncode: int | None
    stdout: str = ""
    stderr: str = ""
    why: str = ""
    timed_out: bool = False

    def output(self) -> str:
        """What it printed, on one line, its errors first; "" where it printed nothing."""
        return " ".join(line.strip() for line in (self.stderr + self.stdout).splitlines() if line.strip())

    def said(self) -> str:
        """One line: why there is no answer, else what it printed, else its exit status."""
        if self.returncode is None:
            return self.why
        return self.output() or f"exit status {self.returncode}"


@dataclass(frozen=True)
class Asked:
    """The answers of ask_at_once by the queries' names. `unreachable`: the first answer that showed the
    controller cannot be reached ("scontrol ping: Slurmctld(primary) at ctl is DOWN"), "" where none did; the
    queries still running then were stopped. `waited_s`: from their start to the last answer waited for."""

    answers: dict[str, Answer]
    unreachable: str
    waited_s: float


def ask_at_once(queries: Mapping[str, Query], start: Starter = subprocess.Popen,
                clock: Callable[[], float] = time.monotonic) -> Asked:
    """Start every query at once and collect their answers, each ended at its own timeout, all within one
    deadline: the whole takes as long as the slowest, not their sum. As soon as an answer shows that the
    controller cannot be reached (a query that asks it timed out, or says it could not connect, or `scontrol
    ping` finds every controller DOWN), the queries still running are stopped: none of them can answer.
    `start` is subprocess.Popen or a stand-in with its communicate, kill and returncode."""
    began = clock()
    reports: queue.SimpleQueue[tuple[str, Answer]] = queue.SimpleQueue()
    answers: dict[str, Answer] = {}
    running: dict[str, Any] = {}
    for name, query in queries.items():
        try:
            process = start(list(query.argv), stdin=subprocess.PIPE if query.input is not None else subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace",
                            cwd=query.cwd)
        except FileNotFoundError:
            answers[name] = Answer(None, why=f"{query.argv[0]} is not on PATH")
            continue
        except OSError as exc:
            answers[name] = Answer(None, why=f"{query.argv[0]}: {exc.strerror or exc}")
            continue
        running[name] = process
        threading.Thread(target=_collect, args=(name, query, process, reports), daemon=True).start()
    deadline = began + max((query.timeout_s for query in queries.values()), default=0.0) + _DEADLINE_MARGIN_S
    unreachable = ""
    while running and not unreachable:
        try:
            name, answer = reports.get(timeout=max(deadline - clock(), 0.0))
        except queue.Empty:  # past the deadline: a thread did not end its process in time
            for name in running:
                answers[name] = Answer(None, why=f"{queries[name].argv[0]} gave no answer in {deadline - began:.0f} s",
                                       timed_out=True)
                unreachable = unreachable or _unreachable(queries[name], answers[name])
            break
        del running[name]
        answers[name] = answer
        unreachable = _unreachable(queries[name], answer)
    waited_s = clock() - began
    if running:
        _stop(running, reports, unreachable)
        for name in running:
            answers.setdefault(name, Answer(None, why=f"stopped: {unreachable}" if unreachable
                                            else f"{queries[name].argv[0]} gave no answer in time"))
    return Asked(answers, unreachable, waited_s)


def _collect(name: str, query: Query, process: Any, reports: queue.SimpleQueue[tuple[str, Answer]]) -> None:
    """A thread's whole work: wait for one query's process, end it at the query's timeout, and report its answer.
    It reports whatever happens, so that the collector never waits out its deadline for a thread that failed."""
    answer = Answer(None, why=f"{query.argv[0]} ended without an answer")
    try:
        stdout, stderr = process.communicate(query.input, timeout=query.timeout_s)
        answer = Answer(process.returncode, stdout or "", stderr or "")
    except subprocess.TimeoutExpired:
        answer = Answer(None, why=f"{query.argv[0]} gave no answer in {query.timeout_s:g} s", timed_out=True)
        process.kill()
        process.communicate()
    except (OSError, ValueError) as exc:  # its pipes failed: no answer to read
        answer = Answer(None, why=f"{query.argv[0]}: {exc}")
        process.kill()
    finally:
        reports.put((name, answer))


def _stop(running: Mapping[str, Any], reports: queue.SimpleQueue[tuple[str, Answer]], unreachable: str) -> None:
    """Kill the processes of the queries still running and give their threads a moment to reap them."""
    for process in running.values():
        try:
            process.kill()
        except OSError:  # it ended meanwhile
            pass
    until = time.monotonic() + _REAP_S
    left = set(running)
    while left and (remaining := until - time.monotonic()) > 0:
        try:
            name, _answer = reports.get(timeout=remaining)
        except queue.Empty:
            break
        left.discard(name)


def _unreachable(query: Query, answer: Answer) -> str:
    """What in `answer` shows that the controller cannot be reached ("" where nothing does): a query that asks it
    timed out, or failed with a message that it could not connect, or `scontrol ping` named every controller
    DOWN (ping reports a refused connection at once, where the other commands first retry for seconds)."""
    if not query.controller:
        return ""
    if answer.timed_out:
        return f"{query.text()}: {answer.why}"
    if query.argv[1:] == ("ping",):
        states = [line.strip() for line in answer.stdout.splitlines() if " is " in line]
        if states and all(line.endswith(" is DOWN") for line in states):
            return f"{query.text()}: {'; '.join(states)}"
    if answer.returncode in (None, 0):  # it answered, or it never started (not on PATH): the controller is not why
        return ""
    said = answer.said()
    return f"{query.text()}: {said}" if any(sign in said.lower() for sign in _UNREACHABLE) else ""
