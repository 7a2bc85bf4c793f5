"""`envrun recipe draft`'s planner (envbuild.slurm.recipedraft): recorded and site-shaped scontrol output, gres.conf,
lscpu and GPU tool answers in (tests/fixtures/scontrol/, tests/fixtures/recipedraft/README.md), the recipe text
out, compared with tests/golden/recipedraft-*.yaml; every draft loads with the strict loader as it is, also one
drafted from scontrol-shaped output with any values (hypothesis)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envbuild.recipes.loadrecipe import load_recipe, validate_recipe_file
from envbuild.recipes.ops import system_argument
from envbuild.shared.errors import UsageError
from envbuild.slurm.draftfacts import read_draft_input, recipe_name
from envbuild.slurm.recipedraft import (
    DRAFT_MARK,
    DraftInput,
    NodeProbe,
    gpu_cpus_from_tool,
    gpu_vendor_of,
    gres_gpus_of,
    lscpu_cores,
    plan_draft,
    yaml_scalar,
)
from tests.support.golden import check_golden

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
SCONTROL = FIXTURES / "scontrol"
DRAFT = FIXTURES / "recipedraft"
WHEN = "2026-11-28 20:15 UTC"


def text(name: str) -> str:
    return (DRAFT / name).read_text() if (DRAFT / name).exists() else (SCONTROL / name).read_text()


def smt_site_nodes() -> str:
    """The site's GPU nodes with SMT on (2 threads per core, Slurm counting threads)."""
    lines = []
    for line in text("site-node.txt").splitlines():
        if line.startswith("NodeName=g"):
            line = line.replace("CPUEfctv=64 CPUTot=64", "CPUEfctv=128 CPUTot=128").replace("ThreadsPerCore=1", "ThreadsPerCore=2")
        lines.append(line)
    return "\n".join(lines) + "\n"


def mixed_site_nodes() -> str:
    """The site with one GPU node of another kind in partition gpu (g004: 8 H100)."""
    return text("site-node.txt").replace("NodeName=g004 Arch=x86_64 CoresPerSocket=32  CPUAlloc=0 CPUEfctv=64 CPUTot=64 "
                                         "CPULoad=0.01 AvailableFeatures=a100,ib ActiveFeatures=a100,ib Gres=gpu:a100:4",
                                         "NodeName=g004 Arch=x86_64 CoresPerSocket=32  CPUAlloc=0 CPUEfctv=64 CPUTot=64 "
                                         "CPULoad=0.01 AvailableFeatures=h100,ib ActiveFeatures=h100,ib Gres=gpu:h100:8")


AMD_PARTITION = ("PartitionName=standard-g Default=YES MaxNodes=1024 MaxTime=2-00:00:00 Nodes=nid[005000-005001] "
                 "State=UP OverSubscribe=EXCLUSIVE TotalNodes=2\n")
AMD_NODES = "".join(f"NodeName=nid00500{i} Arch=x86_64 CoresPerSocket=64 CPUTot=128 Gres=gpu:mi250:8 RealMemory=491520 "
                    "Sockets=1 ThreadsPerCore=2 CoreSpecCount=8 State=IDLE Partitions=standard-g\n" for i in range(2))

# case -> (cluster, partitions, nodes, gres.conf or None, why none, probe, --partition)
GOLDEN_CASES: dict[str, tuple[str, str, str, str | None, str, NodeProbe | None, str | None]] = {
    # the test cluster as recorded: fake untyped GPUs, no Cores=, lscpu on its one node
    "local": ("envbuild-local", text("local-partition.txt"), text("local-node.txt"), text("local-gres.conf"), "",
              NodeProbe(node="vm", lscpu=text("local-lscpu.txt")), None),
    # a default CPU partition beside GPU partitions: node: describes the GPU nodes, gres.conf's Cores= the map
    "site-gres-cores": ("site", text("site-partition.txt"), text("site-node.txt"), text("site-gres.conf"), "", None,
                        None),
    # configless (no gres.conf), drafted in a job on g001: the map from nvidia-smi topo -m through lscpu's cores
    "site-nvidia-smi": ("site", text("site-partition.txt"), smt_site_nodes(), None,
                        "no /etc/slurm/gres.conf here; a configless Slurm keeps it on the nodes",
                        NodeProbe(node="g001", lscpu=text("site-lscpu-g001.txt"), gpu_tool="nvidia-smi topo -m",
                                  gpu_tool_output=text("site-nvidia-smi-topo.txt")), None),
    # a partition whose nodes differ: the shape most share, the other named
    "site-mixed": ("site", text("site-partition.txt"), mixed_site_nodes(), text("site-gres.conf"), "", None, "gpu"),
    # --partition of CPU nodes
    "site-cpu": ("site", text("site-partition.txt"), text("site-node.txt"), None, "", None, "cpu"),
    # AMD GPUs, whole-node partition, cores kept for the system, the map from rocm-smi's NUMA affinity
    "amd-rocm-smi": ("lumi-like", AMD_PARTITION, AMD_NODES, None, "no /etc/slurm/gres.conf here",
                     NodeProbe(node="nid005000", lscpu=text("amd-lscpu.txt"), gpu_tool="rocm-smi --showtoponuma",
                               gpu_tool_output=text("rocm-smi-toponuma.txt")), None),
}


def draft_input(case: str) -> DraftInput:
    cluster, partitions, nodes, gres, why, probe, partition = GOLDEN_CASES[case]
    return DraftInput(cluster=cluster, name=case, drafted_at=WHEN, partitions_text=partitions, nodes_text=nodes,
                      gres_conf=gres, gres_conf_path="/etc/slurm/gres.conf", gres_conf_why=why, probe=probe,
                      partition=partition)


def golden_names() -> set[str]:
    return {f"recipedraft-{case}.yaml" for case in GOLDEN_CASES}


@pytest.mark.parametrize("case", sorted(GOLDEN_CASES))
def test_draft_matches_golden(case: str) -> None:
    check_golden(f"recipedraft-{case}.yaml", plan_draft(draft_input(case)).text)


@pytest.mark.parametrize("case", sorted(GOLDEN_CASES))
def test_every_draft_loads_as_it_is(case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The strict validation of recipes/ files, and --system FILE's loader (cache and all), take it unchanged."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("ENVBUILD_CACHE_DIR", str(tmp_path / "cache" / "envbuild"))
    path = tmp_path / f"{case}.yaml"
    path.write_text(plan_draft(draft_input(case)).text)
    model = validate_recipe_file(path, case)
    assert DRAFT_MARK in model.notes[-1]
    view = load_recipe(str(path))
    assert view.name == case and system_argument(view) == str(path)
    again = load_recipe(str(path))  # from the cache now
    assert again.name == case and again.source["file"] == str(path)  # type: ignore[attr-defined]


def test_what_the_drafts_say() -> None:
    site = validate_draft("site-gres-cores")
    assert site.node is not None and (site.node.gpus, site.node.gpu_vendor, site.node.cores) == (4, "nvidia", 64)
    assert site.node.gpu_cores == {0: tuple(range(32)), 1: tuple(range(32)), 2: tuple(range(32, 64)),
                                   3: tuple(range(32, 64))}
    assert site.partitions["cpu"].cpu_only and site.partitions["gpu_dev"].max_time == "00:30:00"
    assert site.runtime.flags == ("--nv",) and site.detect.slurm_cluster_names == ("site",)
    smt = validate_draft("site-nvidia-smi")
    assert smt.node is not None and (smt.node.threads_per_core, smt.node.slurm_cpus_per_core) == (2, 2)
    assert smt.node.gpu_cores == site.node.gpu_cores  # CPUs 64-95 are the second threads of cores 0-31
    amd = validate_draft("amd-rocm-smi")
    assert amd.node is not None and (amd.node.gpu_vendor, amd.node.usable_cores, amd.node.gpu_cores[0]) == (
        "amd", 56, tuple(range(48, 64)))
    assert amd.partitions["standard-g"].full_node and amd.runtime.flags == ("--rocm",)
    local = validate_draft("local")
    assert local.node is not None and (local.node.gpus, local.node.gpu_vendor, local.node.gpu_cores) == (4, "none", {})
    assert plan_draft(draft_input("site-mixed")).notes[0] == (
        "partition gpu's nodes differ: the draft describes the 3 of 4 with 64 cores, 1 thread per core, 4 GPUs (a100)")


def validate_draft(case: str):  # type: ignore[no-untyped-def]
    from envbuild.recipes.schema import Recipe
    from envbuild.shared.yamlsource import parse_yaml_text

    return Recipe.model_validate(parse_yaml_text(plan_draft(draft_input(case)).text, case).data)


def test_every_fact_names_its_source() -> None:
    """Each value line under node: and partitions: carries a comment with a command and the date."""
    for case in GOLDEN_CASES:
        lines = plan_draft(draft_input(case)).text.splitlines()
        start = lines.index("node:") if "node:" in lines else None
        facts = [line for line in lines[start:] if line.startswith("  ") and not line.strip().startswith(("#", "-"))
                 and ":" in line and not line.rstrip().endswith(":") and not line.startswith("    ")] if start else []
        assert facts, case
        for line in facts:
            assert "   # " in line, f"{case}: {line}"


def test_a_gpu_tool_that_sees_fewer_gpus_than_the_node_has() -> None:
    """In a step given 2 of the node's 4 GPUs, nvidia-smi shows those 2: no map, and the draft says why."""
    given = draft_input("site-nvidia-smi")
    two = "\n".join(line for line in text("site-nvidia-smi-topo.txt").splitlines() if not line.startswith(("GPU2", "GPU3")))
    probe = NodeProbe(node="g001", lscpu=text("site-lscpu-g001.txt"), gpu_tool="nvidia-smi topo -m", gpu_tool_output=two)
    draft = plan_draft(DraftInput(**{**given.__dict__, "probe": probe}))
    assert "  gpu_cores:" not in draft.text
    assert "nvidia-smi topo -m on g001 showed 2 of the node's 4 GPUs: ask the allocation for all of them" in draft.notes[-1]


def test_an_unknown_partition_is_refused_with_the_known_ones() -> None:
    given = draft_input("site-cpu")
    with pytest.raises(UsageError) as caught:
        plan_draft(DraftInput(**{**given.__dict__, "partition": "kempner_dev"}))
    assert "no partition kempner_dev" in caught.value.message and "gpu, gpu_dev, cpu" in (caught.value.hint or "")


def test_gres_conf_lines() -> None:
    gres = gres_gpus_of("NodeName=a[1-2] Name=gpu File=/dev/nvidia[0-1] Cores=0-3\nNodeName=b1 Name=gpu Count=2\n"
                        "Name=mps Count=100\nNodeName=a[1-2] Name=gpu File=/dev/nvidia2 Cores=4,5  # near socket 1\n", "a2")
    assert gres.files == ("/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia2")
    assert gres.cores == {0: (0, 1, 2, 3), 1: (0, 1, 2, 3), 2: (4, 5)}
    assert gres_gpus_of("NodeName=b1 Name=gpu Count=2\n", "b1").files == ("", "")
    assert gres_gpus_of("AutoDetect=nvml\n", "x").autodetect == "nvml"


@pytest.mark.parametrize(("gpu_type", "files", "autodetect", "vendor"), [
    ("a100", (), "", "nvidia"), ("nvidia_h100_80gb_hbm3", (), "", "nvidia"), ("gh200", (), "", "nvidia"),
    ("mi250x", (), "", "amd"), ("amd_instinct_mi300a", (), "", "amd"), (None, ("/dev/nvidia0",), "", "nvidia"),
    (None, (), "rsmi", "amd"), (None, ("/var/tmp/gpu0",), "", None), ("tpu", (), "", None),
])
def test_gpu_vendor(gpu_type: str | None, files: tuple[str, ...], autodetect: str, vendor: str | None) -> None:
    assert gpu_vendor_of(gpu_type, files, autodetect)[0] == vendor


def test_gpu_tools_and_lscpu() -> None:
    core_of, numa = lscpu_cores(text("amd-lscpu.txt"))
    assert core_of[64] == 0 and numa[3] == tuple(range(48, 64))
    assert gpu_cpus_from_tool("rocm-smi --showtoponuma", text("rocm-smi-toponuma.txt"), numa)[4] == tuple(range(16))
    nvidia = gpu_cpus_from_tool("nvidia-smi topo -m", text("site-nvidia-smi-topo.txt"), {})
    assert sorted(nvidia) == [0, 1, 2, 3] and nvidia[2][:2] == (32, 33)
    assert gpu_cpus_from_tool("nvidia-smi topo -m", "No devices were found\n", {}) == {}


@pytest.mark.parametrize(("value", "written"), [
    ("debug", "debug"), ("yes", '"yes"'), ("a: b", '"a: b"'), ("gpu_dev", "gpu_dev"), ("#x", '"#x"'), ("", '""'),
    ("a,b]", '"a,b]"'), ("x{y}", '"x{y}"'), ("nvidia_a100-sxm4-80gb", "nvidia_a100-sxm4-80gb"),
])
def test_yaml_scalars(value: str, written: str) -> None:
    assert yaml_scalar(value) == written


def test_without_slurm_the_reader_says_so() -> None:
    def no_scontrol(argv: list[str], **_: object) -> subprocess.CompletedProcess[str]:
        raise FileNotFoundError(argv[0])

    with pytest.raises(UsageError) as caught:
        read_draft_input(name=None, partition=None, environ={}, run=no_scontrol)
    assert "scontrol" in caught.value.message and "login node" in (caught.value.hint or "")
    assert caught.value.exit_code == 2


def test_the_reader_hands_over_what_scontrol_says(tmp_path: Path) -> None:
    answers = {("show", "config"): f"ClusterName             = Envbuild Local\nSLURM_CONF = {tmp_path}/slurm.conf\n",
               ("show", "partition", "--oneliner"): text("local-partition.txt"),
               ("show", "node", "--oneliner"): text("local-node.txt")}
    (tmp_path / "gres.conf").write_text(text("local-gres.conf"))

    def scontrol(argv: list[str], **_: object) -> subprocess.CompletedProcess[str]:
        if argv[0] != "scontrol":
            return subprocess.CompletedProcess(argv, 1, "", "")
        return subprocess.CompletedProcess(argv, 0, answers[tuple(argv[1:])], "")

    given = read_draft_input(name=None, partition=None, environ={}, run=scontrol, hostname="login1")
    assert (given.cluster, given.name, given.probe) == ("Envbuild Local", "envbuild-local", None)
    assert given.gres_conf == text("local-gres.conf") and given.gres_conf_path == f"{tmp_path}/gres.conf"
    assert recipe_name("LUMI_G") == "lumi-g"



_WORD = st.text(alphabet="abcdefgxyz0189_-.:,[]{}#' ", min_size=1, max_size=12)


@st.composite
def clusters(draw: st.DrawFn) -> tuple[str, str, str | None]:
    """scontrol-shaped partitions and nodes with any values where Slurm prints numbers, names and gres, and a
    gres.conf with any Cores=: what a site's Slurm might print, or garble."""
    names = draw(st.lists(st.from_regex(r"[a-z][a-z0-9]{0,5}", fullmatch=True), min_size=1, max_size=4, unique=True))
    number = st.one_of(st.integers(0, 300).map(str), st.sampled_from(["", "UNLIMITED", "N/A", "x"]))
    gres = st.one_of(st.just("(null)"), st.builds(lambda t, n: f"gpu:{t}:{n}" if t else f"gpu:{n}",
                                                  st.sampled_from(["", "a100", "mi250x", "weird"]), st.integers(0, 9)))
    nodes = "".join(
        f"NodeName={name} Arch={draw(st.sampled_from(['x86_64', 'aarch64', 'ppc64le', '']))} "
        f"CoresPerSocket={draw(number)} CPUTot={draw(number)} Gres={draw(gres)} RealMemory={draw(number)} "
        f"Sockets={draw(number)} ThreadsPerCore={draw(number)} CoreSpecCount={draw(number)} "
        f"MemSpecLimit={draw(number)}\n" for name in names)
    partitions = "".join(
        f"PartitionName={draw(_WORD).replace(' ', '_').replace('=', '_')} Default={draw(st.sampled_from(['YES', 'NO']))} "
        f"MaxNodes={draw(number)} MaxTime={draw(st.sampled_from(['UNLIMITED', '1-00:00:00', '30', '0', 'x']))} "
        f"Nodes={','.join(draw(st.lists(st.sampled_from(names), max_size=3)))} "
        f"OverSubscribe={draw(st.sampled_from(['NO', 'EXCLUSIVE']))}\n" for _ in range(draw(st.integers(0, 3))))
    gres_conf = draw(st.one_of(st.none(), st.builds(
        lambda n, c: f"NodeName={names[0]} Name=gpu File=/dev/nvidia[0-{n}] Cores={c}\n",
        st.integers(0, 8), st.sampled_from(["0-3", "0,2", "99", "x", ""]))))
    return partitions, nodes, gres_conf


@settings(max_examples=60, deadline=None)
@given(clusters(), st.from_regex(r"[A-Za-z][A-Za-z0-9 _.-]{0,15}", fullmatch=True))
def test_any_cluster_gives_a_draft_the_loader_takes(cluster: tuple[str, str, str | None], name: str) -> None:
    from envbuild.commands.recipe import check_draft

    partitions, nodes, gres_conf = cluster
    draft = plan_draft(DraftInput(cluster=name, name=name, drafted_at=WHEN, partitions_text=partitions,
                                  nodes_text=nodes, gres_conf=gres_conf, gres_conf_path="/etc/slurm/gres.conf"))
    check_draft(draft.text, name)
