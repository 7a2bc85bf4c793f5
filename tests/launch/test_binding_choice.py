"""LUMI-G's 2026 binding in envrun's launch plan: srun's own GPU binding (--gpu-bind=map with allow-task-sharing)
where srun has it, else the CPU masks; torchrun's --numa-binding where the image's torch is new enough, else
envrun's per-rank affinity. Each choice is said in the plan's reasons; the user's own binding options win.
The golden scripts of each branch are in tests/launch/test_plan.py (lumi-*-gpu-bind, -slurm-23-02,
-numa-binding, -torch-2-10); the recipe side in tests/recipes/test_binding_2026.py."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from envbuild.launch.bindingfacts import image_torch, slurm_version
from envbuild.launch.bindstyle import slurm_version_in, user_gpu_binding
from tests.launch.test_plan import SLURM_23_02, SLURM_24_05, TORCH_2_11, plan, program_words
from tests.support.launch_allocations import LUMI_4_NODES, LUMI_FULL_NODE, LUMI_FULL_NODE_4_TASKS

MAP = "--gpu-bind=map:4,5,2,3,6,7,0,1"
SHARING = "--gres-flags=allow-task-sharing"
MASKS = "--cpu-bind=mask_cpu:"


def host_shim(argv: tuple[str, ...]) -> str:
    return argv[argv.index("/bin/sh") + 2]


def reasons(p) -> str:
    return "\n".join(p.reasons)


def test_srun_version_lines() -> None:
    assert slurm_version_in("slurm 23.11.10") == "23.11.10"
    assert slurm_version_in("slurm-wlm 22.05.8") == "22.05.8"  # Debian's package
    assert slurm_version_in("srun: error: something") == ""


def test_new_form_only_where_srun_has_allow_task_sharing() -> None:
    new = plan("srun", "python", "train.py", system="lumi-g", environ=LUMI_FULL_NODE, **SLURM_24_05)
    assert MAP in new.argv and SHARING in new.argv
    assert not any(word.startswith(MASKS) for word in new.argv)
    assert "ROCR_VISIBLE_DEVICES" not in host_shim(new.argv)  # srun gives each task its GCD
    assert "srun is Slurm 24.05.8 (`srun --version`, /usr/bin/srun)" in reasons(new)
    assert dict(new.env)["OMP_NUM_THREADS"] == "7"
    unknown = {"slurm": ("", "no srun on PATH")}
    for facts in (SLURM_23_02, unknown, {}):  # an older srun, an unknown version, not read: the masks, as before
        old = plan("srun", "python", "train.py", system="lumi-g", environ=LUMI_FULL_NODE, **facts)
        assert MAP not in old.argv and SHARING not in old.argv
        assert any(word.startswith(MASKS + "0x00fe000000000000,") for word in old.argv)
        assert 'export ROCR_VISIBLE_DEVICES="$SLURM_LOCALID"' in host_shim(old.argv)
        if facts:
            assert f"not {MAP} {SHARING}" in reasons(old) and "23.11.4" in reasons(old)
    # a plan made without reading the version (a batch script's preview) says that the step decides, not that the
    # masks were chosen
    preview = reasons(plan("srun", "python", "train.py", system="lumi-g", environ=LUMI_FULL_NODE))
    assert f"{MAP} {SHARING} (recipes/lumi-g.yaml:" in preview and f"not {MAP}" not in preview
    assert ("where srun is Slurm 23.11.4 or newer, else the CPU masks below: envrun reads srun's version when it "
            "starts the step") in preview and "as before" not in preview


def test_new_form_needs_one_task_per_gpu_on_a_whole_node() -> None:
    # 4 tasks of 2 GCDs each: the map gives a task one GPU, so the masks of both GCDs stay
    four = plan("srun", "python", "train.py", system="lumi-g", environ=LUMI_FULL_NODE_4_TASKS, **SLURM_24_05)
    assert MAP not in four.argv and any(word.startswith(MASKS) for word in four.argv)
    assert "these 4 task(s) share 8 GPUs" in reasons(four)
    # small-g shares nodes: neither masks nor the map (both assume the node's own core order)
    half = dict(LUMI_FULL_NODE, SLURM_JOB_PARTITION="small-g", SLURM_JOB_CPUS_PER_NODE="56", SLURM_CPUS_ON_NODE="56")
    shared = plan("srun", "python", "train.py", system="lumi-g", environ=half, **SLURM_24_05)
    assert MAP not in shared.argv and "--cpu-bind=cores" in shared.argv


def test_the_users_own_binding_wins() -> None:
    # the user's --gpu-bind: no second one, no masks (they assume task i uses GPU i), no per-task GPU variable
    own = plan("srun", "--gpu-bind=map:4,5,2,3,6,7,0,1", SHARING, "python", "train.py", system="lumi-g",
               environ=LUMI_FULL_NODE, **SLURM_23_02)
    assert own.argv.count(MAP) == 1 and own.argv.count(SHARING) == 1
    assert not any(word.startswith("--cpu-bind") for word in own.argv)
    assert "ROCR_VISIBLE_DEVICES" not in host_shim(own.argv) and not own.warnings
    # ... without allow-task-sharing: the plan warns that GPU-to-GPU communication breaks
    bare = plan("srun", "--gpu-bind=map:4,5,2,3,6,7,0,1", "python", "train.py", system="lumi-g", environ=LUMI_FULL_NODE)
    assert SHARING not in bare.argv
    assert any("without --gres-flags=allow-task-sharing" in warning for warning in bare.warnings)
    # the user's --gres-flags=allow-task-sharing says srun has it, whatever its version: envrun adds only the map
    flag = plan("srun", SHARING, "python", "train.py", system="lumi-g", environ=LUMI_FULL_NODE)
    assert MAP in flag.argv and flag.argv.count(SHARING) == 1 and f"your srun {SHARING}" in reasons(flag)
    # other --gres-flags: envrun does not change them, and keeps the masks
    other = plan("srun", "--gres-flags=enforce-binding", "python", "train.py", system="lumi-g", environ=LUMI_FULL_NODE,
                 **SLURM_24_05)
    assert MAP not in other.argv and any(word.startswith(MASKS) for word in other.argv)
    # the user's --cpu-bind: envrun adds no binding of its own, GPU or CPU
    cpu = plan("srun", "--cpu-bind=cores", "python", "train.py", system="lumi-g", environ=LUMI_FULL_NODE, **SLURM_24_05)
    assert MAP not in cpu.argv and cpu.argv.count("--cpu-bind=cores") == 1
    # --gpu-bind=none or verbose binds nothing
    assert user_gpu_binding(("--gpu-bind=verbose",)) == "" and user_gpu_binding(("--gpu-bind", "none")) == ""
    assert user_gpu_binding(("--gpu-bind=verbose,map:0,1",)) == "verbose,map:0,1"


def test_torchrun_numa_binding_only_with_a_new_enough_torch_and_numactl() -> None:
    numa = plan("srun", "torchrun", "train.py", system="lumi-g", environ=LUMI_4_NODES, **TORCH_2_11)
    words = program_words(numa.argv)
    assert words == ("torchrun", "--nproc-per-node=8", "--numa-binding=exclusive", "train.py")
    assert "ENVRUN_RANK_CORES" not in dict(numa.env)  # torchrun pins the ranks, not envrun's rank shim
    assert "the image's torch is 2.11.0+rocm7.1 (/opt/venv in env.sif), 2.11 or newer" in reasons(numa)
    for torch, why in ((("2.10.0+rocm7.0", "/opt/venv in env.sif", True), "older than the 2.11"),
                       (("2.11.0", "/opt/venv in env.sif", False), "the image has no numactl"),
                       (("", "no torch found in env.sif's Python environments", False), "version is unknown")):
        kept = plan("srun", "torchrun", "train.py", system="lumi-g", environ=LUMI_4_NODES, torch=torch)
        assert "--numa-binding=exclusive" not in kept.argv and "ENVRUN_RANK_CORES" in dict(kept.env)
        assert why in reasons(kept)
    preview = plan("srun", "torchrun", "train.py", system="lumi-g", environ=LUMI_4_NODES)  # the image not read
    assert "ENVRUN_RANK_CORES" in dict(preview.env)
    assert ("torchrun --numa-binding=exclusive (recipes/lumi-g.yaml:" in reasons(preview) and "where the image's torch "
            "is 2.11 or newer and the image has numactl, else envrun pins each rank itself (below): envrun reads the "
            "image's torch when it starts the step" in reasons(preview))


def test_the_users_torchrun_options_win() -> None:
    own = plan("srun", "torchrun", "--numa-binding=node", "train.py", system="lumi-g", environ=LUMI_4_NODES,
               **TORCH_2_11)
    assert program_words(own.argv) == ("torchrun", "--nproc-per-node=8", "--numa-binding=node", "train.py")
    # fewer ranks than GPUs: torch binds local rank i to GPU i, which this launch does not use one for one
    fewer = plan("srun", "torchrun", "--nproc-per-node=4", "train.py", system="lumi-g", environ=LUMI_4_NODES,
                 **TORCH_2_11)
    assert "--numa-binding=exclusive" not in fewer.argv
    # sites without the binding in their recipe get neither
    puhti = plan("srun", "torchrun", "train.py", system="puhti", **TORCH_2_11, **SLURM_24_05)
    assert "--numa-binding=exclusive" not in puhti.argv and not any("gpu-bind" in word for word in puhti.argv)


def test_slurm_version_is_read_from_srun_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    srun = bin_dir / "srun"
    count = tmp_path / "calls"
    srun.write_text(f"#!/bin/sh\necho x >> {count}\necho 'slurm 24.05.8'\n")
    srun.chmod(srun.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("HOME", str(tmp_path))
    environ = {"PATH": str(bin_dir)}
    assert slurm_version(environ) == ("24.05.8", f"`srun --version`, {srun}")
    assert slurm_version(environ)[0] == "24.05.8"
    assert count.read_text().count("x") == 1  # the second answer came from the user's cache
    assert slurm_version({"PATH": str(tmp_path / "none")}) == ("", "no srun on PATH")


def test_image_torch_from_the_image_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    image = tmp_path / "image"
    site = image / "opt" / "venv" / "lib" / "python3.12" / "site-packages"
    dist = site / "torch-2.11.0+rocm7.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: torch\nVersion: 2.11.0+rocm7.1\n")
    (image / "opt" / "venv" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (image / "opt" / "venv" / "bin").mkdir()
    (image / "opt" / "venv" / "bin" / "python").write_text("")
    version, where, numactl = image_torch(str(image), ())
    assert (version, numactl) == ("2.11.0+rocm7.1", False) and where == "/opt/venv in image"
    (image / "usr" / "bin").mkdir(parents=True)
    (image / "usr" / "bin" / "numactl").write_text("")
    assert image_torch(str(image), ())[2] is True
    # a file that is no image: unknown, and said why
    other = tmp_path / "notes.txt"
    other.write_text("x")
    version, where, _ = image_torch(str(other), ())
    assert version == "" and "could not be read" in where
