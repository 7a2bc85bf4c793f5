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
(`sacctmgr show assoc`, read_associations), which a cluster may not run (no slurmdbd): then they are unknown,
and the check says so rather than calling an account valid.
"""

from __future__ import annotations

import re
import subprocess
import time
from dataclasses import dataclass, field

from envbuild.shared.durations import parse_slurm_time
from envbuild.shared.errors import UsageError
from envbuild.shared.versionnumbers import release_in, version_word

SCONTROL_TIMEOUT_S = 15  # slurmctld answers in well under a second; a hung one must not hang the check
TEST_ONLY_TIMEOUT_S = 30
SACCTMGR_TIMEOUT_S = 15  # slurmdbd may be down or far away: sacctmgr then waits on its connection
_KEY = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z0-9_:/.]*)=")
_GPU_GRES = re.compile(r"(?:^|,)gpu(?::([^:,(]+))?:(\d+)")


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
    associations: Associations | None = None  # the user's accounts (read_associations); None: not asked

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
    enforce: str = ""  # AccountingStorageEnforce as `scontrol show config` prints it (read_enforcement); "": unknown

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


def read_cluster(name: str, run: object = subprocess.run) -> ClusterFacts | None:
    """The facts of the cluster scontrol answers for (named `name` by the caller: its ClusterName); None where
    scontrol is missing, fails or does not answer in time."""
    outputs: list[str] = []
    for what in ("partition", "node"):
        try:
            done = run(["scontrol", "show", what, "--oneliner"], capture_output=True, text=True,  # type: ignore[operator]
                       timeout=SCONTROL_TIMEOUT_S, check=False)
        except (OSError, subprocess.TimeoutExpired):
            return None
        if done.returncode != 0:
            return None
        outputs.append(done.stdout)
    return ClusterFacts(name=name, read_at=time.strftime("%Y-%m-%dT%H:%M"), partitions=parse_partitions(outputs[0]),
                        nodes=parse_nodes(outputs[1]), slurm_version=read_slurm_version(run))


def read_slurm_version(run: object = subprocess.run) -> str:
    """The version `scontrol --version` prints ("22.05.8"); "" where it does not answer."""
    try:
        done = run(["scontrol", "--version"], capture_output=True, text=True,  # type: ignore[operator]
                   timeout=SCONTROL_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return version_word(done.stdout) if done.returncode == 0 else ""


def read_associations(user: str, cluster: str, run: object = subprocess.run) -> Associations:
    """The user's associations on `cluster` ("" for every cluster accounting knows), from
    `sacctmgr -nP show assoc` (one `account|partition` line each); answered False, with what sacctmgr said, where
    accounting does not answer within SACCTMGR_TIMEOUT_S."""
    read_at = time.strftime("%Y-%m-%dT%H:%M")
    command = ["sacctmgr", "-nP", "show", "assoc", f"user={user}", *([f"cluster={cluster}"] if cluster else []),
               "format=account,partition"]
    try:
        done = run(command, capture_output=True, text=True, timeout=SACCTMGR_TIMEOUT_S, check=False)  # type: ignore[operator]
    except FileNotFoundError:
        return Associations(user, read_at, answered=False, why="sacctmgr is not on PATH")
    except OSError as exc:
        return Associations(user, read_at, answered=False, why=f"sacctmgr: {exc.strerror}")
    except subprocess.TimeoutExpired:
        return Associations(user, read_at, answered=False, why=f"sacctmgr gave no answer in {SACCTMGR_TIMEOUT_S} s")
    if done.returncode != 0:
        said = " ".join(line.strip() for line in (done.stderr + done.stdout).splitlines() if line.strip())
        return Associations(user, read_at, answered=False,
                            why=f"sacctmgr: {said}" if said else f"sacctmgr exit status {done.returncode}")
    return Associations(user, read_at, answered=True, pairs=parse_associations(done.stdout))


def read_enforcement(run: object = subprocess.run) -> str:
    """AccountingStorageEnforce as `scontrol show config` prints it ("associations,limits,qos,safe", "none"); ""
    where scontrol does not answer or does not say."""
    try:
        done = run(["scontrol", "show", "config"], capture_output=True, text=True,  # type: ignore[operator]
                   timeout=SCONTROL_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    if done.returncode != 0:
        return ""
    output: str = done.stdout
    for line in output.splitlines():
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


def sbatch_test_only(script: str, cwd: str, run: object = subprocess.run) -> tuple[int, str] | None:
    """What `sbatch --test-only` says of the script (its exit status and message: where and when the job would
    start, or why Slurm refuses it); the script goes on sbatch's standard input, so nothing is written. None
    where sbatch is missing or does not answer."""
    try:
        done = run(["sbatch", "--test-only"], input=script, capture_output=True, text=True, cwd=cwd,  # type: ignore[operator]
                   timeout=TEST_ONLY_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    message = " ".join(line.strip() for line in (done.stderr + done.stdout).splitlines() if line.strip())
    return done.returncode, message
