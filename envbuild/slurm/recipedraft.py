"""`envrun recipe draft`: a starting system recipe for a site without one, planned from what its Slurm says.
Pure: the reader (envbuild.slurm.draftfacts) brings scontrol's output, gres.conf and, on a node, lscpu and the
GPU tools' answers as text; this module turns them into the recipe's YAML text, each fact with a comment naming
where and when it was read ("scontrol show node g001, 2026-11-28"), and a note (DRAFT_MARK) saying it is not
reviewed.

Which nodes `node:` describes: the partition asked for (--partition), else the default partition when its
nodes have GPUs, else the partition with GPU nodes that has the most of them (envrun launches GPU training; a
CPU default partition would describe the wrong nodes), else the default partition. Where that partition's
nodes differ, the shape most of them share is taken (its smallest memory, so that a job asking for it fits
on every such node) and a comment lists the others.

What Slurm does not know (binds, environment, the interconnect, the wheel index, which partitions are for
tests) is left out, with a comment saying what to add; the loader accepts the draft as it is.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field

from envbuild.recipes.ops import parse_core_list
from envbuild.shared.durations import format_duration
from envbuild.shared.errors import UsageError
from envbuild.slurm.cluster import NodeFacts, PartitionFacts, expand_hostlist, parse_nodes, parse_oneliners, parse_partitions

# gres type names that say the vendor: NVIDIA's (a100, h100, v100, l40s, gh200, t4, rtx8000, nvidia_a100-sxm4-80gb
# as AutoDetect=nvml names them) and AMD's (mi250x, mi300a, amd_instinct_mi210)
_NVIDIA_TYPE = re.compile(r"(nvidia|tesla|quadro|titan|geforce|rtx|gh\d|gb\d|[ahlvpt]\d)", re.IGNORECASE)
_AMD_TYPE = re.compile(r"(amd|instinct|radeon|mi\d)", re.IGNORECASE)
_YAML_WORDS = {"y", "n", "yes", "no", "on", "off", "true", "false", "null", "none", "~"}
ARCHITECTURES = ("x86_64", "aarch64")
# In every draft's notes: a recipe under recipes/ never holds it (tests/recipes/test_load.py), a site reviews it
DRAFT_MARK = "DRAFTED by envrun recipe draft"


@dataclass(frozen=True)
class NodeProbe:
    """What was read on one node of the cluster (the draft ran there, or in a job there): lscpu's CPU list and,
    inside an allocation, a GPU tool's answer."""

    node: str
    lscpu: str = ""  # `lscpu -p=CPU,CORE,SOCKET,NODE`
    gpu_tool: str = ""  # "nvidia-smi topo -m" or "rocm-smi --showtoponuma"
    gpu_tool_output: str = ""


@dataclass(frozen=True)
class DraftInput:
    cluster: str  # ClusterName
    name: str  # the recipe's name (its file's, without .yaml)
    drafted_at: str  # "2026-11-28 20:15 UTC"
    partitions_text: str  # scontrol show partition --oneliner
    nodes_text: str  # scontrol show node --oneliner
    gres_conf: str | None = None  # the file's text; None where it could not be read
    gres_conf_path: str = ""
    gres_conf_why: str = ""  # why there is none (config-less site, no permission)
    probe: NodeProbe | None = None
    partition: str | None = None  # --partition


@dataclass
class Draft:
    name: str
    text: str
    partition: str | None  # the partition `node:` describes
    notes: list[str] = field(default_factory=list)  # said on stderr: choices made, facts missing


@dataclass(frozen=True)
class _Shape:
    cores: int
    threads: int
    cpus: int
    gpus: int
    gpu_type: str | None
    arch: str
    core_spec: int


def yaml_scalar(text: str) -> str:
    """A string as a YAML scalar: bare where YAML reads it back as the same string, in a block and in a flow
    sequence alike (no `:`, `,`, brackets or braces), else JSON-quoted (JSON's double-quoted strings are YAML's)."""
    if re.fullmatch(r"[A-Za-z_/][A-Za-z0-9_./+-]*", text) and text.lower() not in _YAML_WORDS:
        return text
    return json.dumps(text)


def gpu_vendor_of(gpu_type: str | None, gres_files: tuple[str, ...] = (), autodetect: str = "") -> tuple[str | None, str]:
    """("nvidia"|"amd"|None, the evidence): from the gres type name, else gres.conf's device files or AutoDetect."""
    if gpu_type and _NVIDIA_TYPE.search(gpu_type) and not _AMD_TYPE.match(gpu_type):
        return "nvidia", f"gres type {gpu_type}"
    if gpu_type and _AMD_TYPE.search(gpu_type):
        return "amd", f"gres type {gpu_type}"
    if autodetect in ("nvml", "nvidia"):
        return "nvidia", f"gres.conf AutoDetect={autodetect}"
    if autodetect == "rsmi":
        return "amd", "gres.conf AutoDetect=rsmi"
    if gres_files and all(path.startswith("/dev/nvidia") for path in gres_files):
        return "nvidia", f"gres.conf File={gres_files[0]}"
    return None, ""


@dataclass(frozen=True)
class GresGpus:
    files: tuple[str, ...]  # one per GPU, in gres.conf's order
    cores: dict[int, tuple[int, ...]]  # GPU -> Cores= of its line (empty where a line has none)
    autodetect: str


def gres_gpus_of(text: str, node: str) -> GresGpus:
    """The GPU lines of gres.conf that apply to `node` (NodeName= lists it, or no NodeName=): each device file
    with its line's Cores=, and AutoDetect= where set."""
    files: list[str] = []
    cores: dict[int, tuple[int, ...]] = {}
    autodetect = ""
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        pairs = {key.lower(): value for key, _, value in (word.partition("=") for word in line.split())}
        names = pairs.get("nodename")
        if names is not None and node not in expand_hostlist(names):
            continue
        if "autodetect" in pairs and "name" not in pairs:
            autodetect = pairs["autodetect"].lower()
            continue
        if pairs.get("name") != "gpu":
            continue
        autodetect = pairs.get("autodetect", autodetect).lower()
        devices = expand_hostlist(pairs.get("file", ""))
        count = len(devices) or (int(pairs["count"]) if pairs.get("count", "").isdigit() else 0)
        try:
            line_cores = parse_core_list(pairs["cores"]) if pairs.get("cores") else ()
        except ValueError:
            line_cores = ()
        for index in range(count):
            if line_cores:
                cores[len(files)] = line_cores
            files.append(devices[index] if index < len(devices) else "")
    return GresGpus(tuple(files), cores, autodetect)


def lscpu_cores(text: str) -> tuple[dict[int, int], dict[int, tuple[int, ...]]]:
    """From `lscpu -p=CPU,CORE,SOCKET,NODE`: (CPU -> its core, NUMA node -> its cores)."""
    core_of: dict[int, int] = {}
    numa: dict[int, set[int]] = {}
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        fields = line.split(",")
        if len(fields) < 4 or not (fields[0].isdigit() and fields[1].isdigit()):
            continue
        cpu, core = int(fields[0]), int(fields[1])
        core_of[cpu] = core
        if fields[3].isdigit():
            numa.setdefault(int(fields[3]), set()).add(core)
    return core_of, {node: tuple(sorted(cores)) for node, cores in sorted(numa.items())}


def gpu_cpus_from_tool(tool: str, output: str, numa_cores: dict[int, tuple[int, ...]]) -> dict[int, tuple[int, ...]]:
    """GPU -> its CPUs (nvidia-smi topo -m's CPU Affinity) or cores (rocm-smi's NUMA affinity, through lscpu's
    NUMA nodes); {} when the output has no such column or lines."""
    found: dict[int, tuple[int, ...]] = {}
    if tool.startswith("nvidia-smi"):
        lines = [line for line in output.splitlines() if line.strip()]
        header = next((line.split() for line in lines if "CPU" in line.split() and "Affinity" in line), None)
        if header is None:
            return {}
        devices = header.index("CPU")  # the device columns (GPU0 GPU1 NIC0 ...) stand before "CPU Affinity"
        for line in lines:
            words = line.split()
            match = re.fullmatch(r"GPU(\d+)", words[0]) if words else None
            if match and len(words) > devices + 1:
                try:
                    found[int(match.group(1))] = parse_core_list(words[devices + 1])
                except ValueError:
                    continue
    elif tool.startswith("rocm-smi"):
        for match in re.finditer(r"GPU\[(\d+)\]\s*:\s*\(Topology\) Numa Affinity:\s*(\d+)", output):
            cores = numa_cores.get(int(match.group(2)))
            if cores:
                found[int(match.group(1))] = cores
    return found


def _core_list(cores: tuple[int, ...]) -> str:
    """(1, 2, 3, 7) -> '1-3,7'."""
    parts: list[str] = []
    start = previous = None
    for core in sorted(set(cores)):
        if previous is not None and core == previous + 1:
            previous = core
            continue
        if start is not None:
            parts.append(f"{start}-{previous}" if previous != start else f"{start}")
        start = previous = core
    if start is not None:
        parts.append(f"{start}-{previous}" if previous != start else f"{start}")
    return ",".join(parts)


def _int(value: str | None) -> int:
    return int(value) if value and value.isdigit() else 0


def _shape(node: NodeFacts, entity: dict[str, str]) -> _Shape:
    threads = _int(entity.get("ThreadsPerCore")) or 1
    cores = _int(entity.get("Sockets")) * _int(entity.get("CoresPerSocket")) or (node.cpus or 1) // threads or 1
    return _Shape(cores=cores, threads=threads, cpus=node.cpus or cores * threads, gpus=node.gpus,
                  gpu_type=node.gpu_type, arch=entity.get("Arch", ""), core_spec=_int(entity.get("CoreSpecCount")))


def _describe(shape: _Shape) -> str:
    gpus = f"{shape.gpus} GPUs" + (f" ({shape.gpu_type})" if shape.gpu_type else "") if shape.gpus else "no GPUs"
    threads = "1 thread" if shape.threads == 1 else f"{shape.threads} threads"
    return f"{shape.cores} cores, {threads} per core, {gpus}"


def choose_partition(partitions: dict[str, PartitionFacts], nodes: dict[str, NodeFacts],
                     asked: str | None) -> tuple[PartitionFacts | None, str]:
    """(the partition whose nodes `node:` describes, why): see the module's docstring."""
    if asked is not None:
        if asked not in partitions:
            raise UsageError(f"--partition {asked}: this cluster has no partition {asked}",
                             "use one of: " + (", ".join(partitions) or "none (scontrol shows no partition)"))
        return partitions[asked], "chosen with --partition"

    def gpu_nodes(partition: PartitionFacts) -> int:
        return sum(1 for name in partition.nodes if name in nodes and nodes[name].gpus)

    default = next((p for p in partitions.values() if p.default), None)
    if default is not None and gpu_nodes(default):
        return default, "the default partition, whose nodes have GPUs; --partition chooses another"
    with_gpus = sorted((p for p in partitions.values() if gpu_nodes(p)), key=lambda p: (-gpu_nodes(p), p.name))
    if with_gpus:
        why = "the partition with the most GPU nodes"
        return with_gpus[0], why + (f"; the default, {default.name}, has none" if default else "") + \
            "; --partition chooses another"
    if default is not None:
        return default, "the default partition; no partition has GPU nodes"
    first = next(iter(partitions.values()), None)
    return first, "the first partition; none is the default, none has GPU nodes"


class _Writer:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def add(self, text: str, source: str = "") -> None:
        self.lines.append(f"{text}   # {source}" if source else text)


def plan_draft(given: DraftInput) -> Draft:
    """The drafted recipe's text, and what the command says besides it."""
    day = given.drafted_at.split(" ")[0]
    partitions = parse_partitions(given.partitions_text)
    nodes = parse_nodes(given.nodes_text)
    entities = {entity["NodeName"]: entity for entity in parse_oneliners(given.nodes_text) if entity.get("NodeName")}
    chosen, why_chosen = choose_partition(partitions, nodes, given.partition)
    draft = Draft(name=given.name, text="", partition=chosen.name if chosen else None)
    out = _Writer()
    out.add(f"# Drafted by `envrun recipe draft` on the Slurm cluster {given.cluster} at {given.drafted_at}.")
    out.add("# A DRAFT: every value below is what Slurm said then (its comment names the command and the date), not")
    out.add("# what the site documents. Review each one, replace the comments by citations of the site's public")
    out.add("# pages and remove the DRAFTED note before the file joins recipes/ (docs/concepts/recipes.md, \"Drafting a")
    out.add(f"# recipe\"). Until then it works as it is, saved as {given.name}.yaml: envrun --system ./{given.name}.yaml")
    out.add(f"# (or ENVBUILD_SYSTEM=$PWD/{given.name}.yaml).")
    out.add(f"name: {yaml_scalar(given.name)}")
    out.add(f"description: {yaml_scalar(f'{given.cluster} (drafted from Slurm, {day}; not reviewed)')}")
    out.add("detect:")
    out.add(f"  slurm_cluster_names: [{yaml_scalar(given.cluster)}]", f"scontrol show config ClusterName, {day}")

    node_lines, arch = _node_section(given, chosen, why_chosen, nodes, entities, draft, day)
    if arch in ARCHITECTURES:
        out.add(f"architecture: {arch}", f"scontrol show node Arch={arch}, {day}")
    elif arch:
        out.add(f"# architecture: {arch} is not one envbuild builds for (x86_64, aarch64)")
        draft.notes.append(f"the nodes' architecture {arch} is not one envbuild builds for")
    out.lines += node_lines
    out.lines += _partition_section(partitions, nodes, given.partitions_text, day)
    shape = _chosen_shape(chosen, nodes, entities)
    vendor = _vendor(given, chosen, nodes, shape)[0] if shape else None
    if vendor in ("nvidia", "amd"):
        flag = "--nv" if vendor == "nvidia" else "--rocm"
        out.add("runtime:")
        out.add(f"  flags: [{flag}]", f"the {vendor} GPUs above; an image that brings its own GPU libraries may "
                                      "not need it")
    out.add("# binds, multinode_binds, env, network (fabric, NCCL plugin), pytorch (wheel index, default variant):")
    out.add("# not known to Slurm: add them from the site's documentation (envrun binds the working directory).")
    if shape and shape.gpus:
        out.add("launch:")
        out.add("  gpu_request: --gres=gpu:{gpus}", f"Gres=gpu{':' + shape.gpu_type if shape.gpu_type else ''}:"
                                                    f"{shape.gpus} on {chosen.name if chosen else '?'}'s nodes, the "
                                                    "form every Slurm takes")
    out.add("batch:")
    out.add("  memory: auto", "no --mem: the partition's default memory applies (set per_gpu and "
                              "node.memory_per_gpu_gb where the site asks for memory per GPU)")
    out.add("notes:")
    out.add(f"  - {json.dumps(f'{DRAFT_MARK} on {given.cluster} at {given.drafted_at} from what Slurm said: not reviewed')}")
    draft.text = "\n".join(out.lines) + "\n"
    return draft


def _chosen_nodes(chosen: PartitionFacts | None, nodes: dict[str, NodeFacts],
                  entities: dict[str, dict[str, str]]) -> list[tuple[NodeFacts, _Shape]]:
    if chosen is None:
        return []
    return [(nodes[name], _shape(nodes[name], entities[name])) for name in chosen.nodes if name in nodes and name in entities]


def _chosen_shape(chosen: PartitionFacts | None, nodes: dict[str, NodeFacts],
                  entities: dict[str, dict[str, str]]) -> _Shape | None:
    members = _chosen_nodes(chosen, nodes, entities)
    if not members:
        return None
    counts = Counter(shape for _node, shape in members)
    best = max(counts.values())
    return next(shape for _node, shape in members if counts[shape] == best)  # ties: the first listed


def _vendor(given: DraftInput, chosen: PartitionFacts | None, nodes: dict[str, NodeFacts],
            shape: _Shape) -> tuple[str | None, str]:
    example = next((name for name in (chosen.nodes if chosen else ()) if name in nodes), "")
    gres = gres_gpus_of(given.gres_conf, example) if given.gres_conf and example else GresGpus((), {}, "")
    vendor, evidence = gpu_vendor_of(shape.gpu_type, gres.files, gres.autodetect)
    if vendor is None and given.probe and given.probe.gpu_tool and given.probe.node in (chosen.nodes if chosen else ()):
        vendor = "nvidia" if given.probe.gpu_tool.startswith("nvidia-smi") else "amd"
        evidence = f"{given.probe.gpu_tool} answered on {given.probe.node}"
    return vendor, evidence


def _node_section(given: DraftInput, chosen: PartitionFacts | None, why_chosen: str, nodes: dict[str, NodeFacts],
                  entities: dict[str, dict[str, str]], draft: Draft, day: str) -> tuple[list[str], str]:
    out = _Writer()
    members = _chosen_nodes(chosen, nodes, entities)
    shape = _chosen_shape(chosen, nodes, entities)
    if chosen is None or shape is None:
        what = f"partition {chosen.name} lists no node scontrol shows" if chosen else "scontrol shows no partition"
        out.add(f"node: host   # {what}: envrun reads the node it runs on")
        draft.notes.append(f"{what}: node: host (envrun reads the node it runs on)")
        return out.lines, ""
    same = [node for node, node_shape in members if node_shape == shape]
    example = same[0]
    where = f"scontrol show node {example.name}, {day}"
    out.add(f"# node: the nodes of partition {chosen.name} ({why_chosen}).")
    others = Counter(node_shape for _node, node_shape in members if node_shape != shape)
    if others:
        listed = "; ".join(f"{count} with {_describe(other)}" for other, count in others.most_common())
        out.add(f"# Its nodes differ: {len(same)} of {len(members)} have the shape below, {listed}.")
        draft.notes.append(f"partition {chosen.name}'s nodes differ: the draft describes the {len(same)} of "
                           f"{len(members)} with {_describe(shape)}")
    out.add("node:")
    out.add(f"  gpus: {shape.gpus}", f"Gres={entities[example.name].get('Gres', '(null)')}, {where}")
    vendor, evidence = _vendor(given, chosen, nodes, shape)
    if shape.gpus and vendor:
        out.add(f"  gpu_vendor: {vendor}", f"{evidence}, {where}")
    elif shape.gpus:
        out.add("  gpu_vendor: none", "UNKNOWN: neither the gres type nor gres.conf names the vendor: set nvidia "
                                      "or amd")
        draft.notes.append("the GPUs' vendor is unknown (no gres type, no telling device file): set "
                           "node.gpu_vendor to nvidia or amd")
    if shape.gpu_type:
        out.add(f"  gpu_type: {yaml_scalar(shape.gpu_type)}", f"Gres type, {where}")
    layout = entities[example.name]
    out.add(f"  cores: {shape.cores}", f"Sockets={layout.get('Sockets', '?')} x CoresPerSocket="
                                       f"{layout.get('CoresPerSocket', '?')}, {where}")
    if shape.core_spec and shape.core_spec < shape.cores:
        out.add(f"  usable_cores: {shape.cores - shape.core_spec}", f"CoreSpecCount={shape.core_spec} kept for "
                                                                      f"the system, {where}")
    out.add(f"  threads_per_core: {shape.threads}", f"ThreadsPerCore={shape.threads}, {where}")
    if shape.threads > 1 and shape.cpus == shape.cores * shape.threads:
        out.add(f"  slurm_cpus_per_core: {shape.threads}", f"CPUTot={shape.cpus} counts threads, {where}")
    memory = min((node.memory_mb or 0) for node in same)
    spec = _int(layout.get("MemSpecLimit"))
    if memory - spec >= 1024:
        low = "" if len({node.memory_mb for node in same}) == 1 else f" (the smallest of {len(same)} nodes)"
        spec_note = f" less MemSpecLimit={spec}" if spec else ""
        out.add(f"  memory_gb: {(memory - spec) // 1024}", f"RealMemory={memory} MB{spec_note}{low}, {where}")
    out.lines += _gpu_cores(given, chosen, shape, same, draft, day)
    return out.lines, shape.arch


def _gpu_cores(given: DraftInput, chosen: PartitionFacts, shape: _Shape, same: list[NodeFacts], draft: Draft,
               day: str) -> list[str]:
    """node.gpu_cores from gres.conf's Cores=, else from a GPU tool on a node of this shape; the NUMA domains
    as a comment where lscpu answered on one."""
    out = _Writer()
    names = {node.name for node in same}
    probe = given.probe if given.probe and given.probe.node in names else None
    core_of, numa = lscpu_cores(probe.lscpu) if probe else ({}, {})
    if numa:
        domains = ", ".join(f"{index}: {_core_list(cores)}" for index, cores in numa.items())
        out.add(f"  # NUMA domains (node -> cores): {domains}   # lscpu on {probe.node if probe else '?'}, {day}")
    if not shape.gpus:
        return out.lines
    mapping: dict[int, tuple[int, ...]] = {}
    source = ""
    tool_why = ""
    if given.gres_conf is not None:
        gres = gres_gpus_of(given.gres_conf, same[0].name)
        if len(gres.cores) == shape.gpus == len(gres.files):
            mapping, source = gres.cores, f"gres.conf Cores= ({given.gres_conf_path}), {day}"
    if not mapping and probe and probe.gpu_tool_output:
        cpus = gpu_cpus_from_tool(probe.gpu_tool, probe.gpu_tool_output, numa)
        if probe.gpu_tool.startswith("nvidia-smi") and core_of:
            cpus = {gpu: tuple(sorted({core_of.get(cpu, cpu) for cpu in listed})) for gpu, listed in cpus.items()}
        if len(cpus) == shape.gpus:
            mapping, source = cpus, f"{probe.gpu_tool} on {probe.node}, {day}"
        else:  # a job step sees only the GPUs it was given
            tool_why = (f"{probe.gpu_tool} on {probe.node} showed {len(cpus)} of the node's {shape.gpus} GPUs: "
                        "ask the allocation for all of them")
    mapping = {gpu: tuple(core for core in cores if core < shape.cores) for gpu, cores in mapping.items()}
    if mapping and sorted(mapping) == list(range(shape.gpus)) and all(mapping.values()):
        out.add("  gpu_cores:", f"GPU -> its closest cores: {source}")
        for gpu, cores in sorted(mapping.items()):
            out.add(f"    {gpu}: {yaml_scalar(_core_list(cores))}")
        return out.lines
    why = "; ".join(filter(None, [given.gres_conf_why or "gres.conf gives no Cores= for each GPU", tool_why]))
    out.add(f"  # gpu_cores: unknown ({why}); run the draft inside an allocation on a {chosen.name} node to read")
    out.add("  # it from nvidia-smi or rocm-smi, or copy it from the site's documentation.")
    draft.notes.append(f"no GPU-to-core map ({why}): ranks get an even split of the cores")
    return out.lines


def _partition_section(partitions: dict[str, PartitionFacts], nodes: dict[str, NodeFacts], text: str,
                       day: str) -> list[str]:
    out = _Writer()
    raw = {entity["PartitionName"]: entity for entity in parse_oneliners(text) if entity.get("PartitionName")}
    if not partitions:
        return ["partitions: {}   # scontrol showed no partition"]
    out.add("partitions:   # test: (short development partitions) and retired ones are the site's to mark")
    for partition in partitions.values():
        fields: list[str] = []
        known = [nodes[name] for name in partition.nodes if name in nodes]
        if partition.max_nodes:
            fields.append(f"max_nodes: {partition.max_nodes}")
        if partition.max_time_s is not None:
            fields.append(f"max_time: '{format_duration(partition.max_time_s)}'")
        if raw.get(partition.name, {}).get("OverSubscribe", "").upper().startswith("EXCLUSIVE"):
            fields += ["full_node: true", "billing: whole-node"]
        if known and not any(node.gpus for node in known):
            fields.append("cpu_only: true")
        elif known:
            fields.append(f"max_gpus_per_node: {max(node.gpus for node in known)}")
        notes = [f"scontrol show partition {partition.name}"]
        if partition.default:
            notes.append("Default=YES")
        if "full_node: true" in fields:
            notes.append("OverSubscribe=EXCLUSIVE: whole nodes")
        if partition.state and partition.state != "UP":
            notes.append(f"State={partition.state} then")
        key = yaml_scalar(partition.name)
        out.add(f"  {key}: {{{', '.join(fields)}}}", f"{', '.join(notes)}, {day}")
    return out.lines

