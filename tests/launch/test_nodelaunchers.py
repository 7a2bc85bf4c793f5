"""`envrun srun accelerate launch ...` and `envrun srun deepspeed ...`: one launcher per node (pure; no Slurm needed).

The shims are executed with /bin/sh: the program shim with a stand-in `accelerate` that prints the words it
got, the host shim with a stand-in `scontrol`, so the values made inside the step are checked, not only the text."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path

import pytest

from envbuild.host.node import HostNode
from envbuild.shared.errors import UsageError
from tests.launch.test_plan import ONE_OVERLAY, plan, words_after
from tests.support.launch_allocations import JUWELS_2_NODES, LUMI_2_NODES, MAHTI_2_NODES, PUHTI_4_GPUS

TRICKY = ("a b", "$HOME; echo hi", "'quoted'", '"dq"', "line\nbreak", "back\\slash", "é漢🙂", "", "--num_processes=99", "-m")


def launcher_shim(argv: tuple[str, ...], name: str) -> tuple[str, tuple[str, ...]]:
    """The program shim's script and the words it gets as "$@"."""
    index = argv.index(name)
    return argv[index - 1], argv[index + 1 :]


def run_program_shim(argv: tuple[str, ...], name: str, tmp_path: Path, env: dict[str, str]) -> list[str]:
    """Run the program shim with stand-ins for accelerate and python that print their argv as JSON."""
    script, words = launcher_shim(argv, name)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for program in ("accelerate", "python"):
        stand_in = bin_dir / program
        stand_in.write_text(f"#!{sys.executable}\nimport json, sys\n"
                            f"print(json.dumps([{program!r}, *sys.argv[1:]]))\n")
        stand_in.chmod(0o755)
    out = subprocess.run(["/bin/sh", "-c", script, name, *words], capture_output=True, text=True, check=True,
                         env={"PATH": f"{bin_dir}:/usr/bin:/bin", **env}).stdout
    return json.loads(out)


STEP = {"ENVRUN_NNODES": "2", "ENVRUN_NODE_RANK": "1", "ENVRUN_MASTER_ADDR": "g1101", "ENVRUN_MASTER_PORT": "23456"}


def run_host_shim_with(argv: tuple[str, ...], tmp_path: Path, env: dict[str, str], hosts: list[str]) -> dict[str, str]:
    """Run the plan's host shim with a stand-in scontrol that lists `hosts`; return what it exports."""
    bin_dir = tmp_path / "hostbin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "scontrol").write_text("#!/bin/sh\nprintf '%s\\n' " + " ".join(hosts) + "\n")
    (bin_dir / "scontrol").chmod(0o755)
    start = argv.index("/bin/sh")
    out = subprocess.run(["/bin/sh", "-c", argv[start + 2], "envrun-task", "env"], capture_output=True, text=True,
                         check=True, env={"PATH": f"{bin_dir}:/usr/bin:/bin", **env}).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


# -- accelerate launch --------------------------------------------------------------------------------------


def test_accelerate_gets_the_step_values_and_the_users_words_verbatim(tmp_path: Path) -> None:
    p = plan("srun", "accelerate", "launch", "--mixed_precision", "bf16", "train.py", *TRICKY, system="puhti",
             environ=PUHTI_4_GPUS)
    got = run_program_shim(p.argv, "envrun-accelerate", tmp_path, STEP)
    assert got[:8] == ["accelerate", "launch", "--num_machines=2", "--machine_rank=1", "--main_process_ip=g1101",
                       "--main_process_port=23456", "--num_processes=8", "--multi_gpu"]
    assert got[8:10] == ["--mixed_precision", "bf16"]  # the user's options, after envrun's
    assert got[10] == "--no_python" and words_after(tuple(got), "envrun-rank") == ("train.py", *TRICKY)
    assert "ACCELERATE_USE_CPU" not in dict(p.env)  # GPUs: accelerate uses them


def test_accelerate_options_the_user_gave_are_kept_and_not_added(tmp_path: Path) -> None:
    user = ("--num-machines=2", "--machine_rank", "0", "--main_process_ip", "10.0.0.1", "--main_process_port=29500",
            "--num_processes", "4", "--multi_gpu", "-m", "pkg.train", "--x", "1")
    p = plan("srun", "accelerate", "launch", *user, system="puhti", environ=PUHTI_4_GPUS)
    script, words = launcher_shim(p.argv, "envrun-accelerate")
    assert script == 'exec accelerate launch "$@"'
    # -m moves into the rank step (accelerate refuses --no_python with --module); the rest stays in order
    assert words[: words.index("--no_python")] == user[:9]
    assert words_after(words, "envrun-rank") == ("-m", "pkg.train", "--x", "1")
    got = run_program_shim(p.argv, "envrun-accelerate", tmp_path, STEP)
    assert [w for w in got if w.startswith("--num_processes")] == ["--num_processes"]
    assert "4 process(es) per node: your --num_processes=4 over 1 node(s) (4 per node)" in p.reasons


@pytest.mark.parametrize("mode", ["--use_fsdp", "--use_megatron_lm", "--use_deepspeed", "--cpu", "--tpu"])
def test_accelerate_modes_the_user_chose_get_no_multi_gpu(mode: str) -> None:
    p = plan("srun", "accelerate", "launch", mode, "train.py", system="puhti", environ=PUHTI_4_GPUS)
    script, words = launcher_shim(p.argv, "envrun-accelerate")
    assert "--multi_gpu" not in script and words[0] == mode
    assert ("--deepspeed_multinode_launcher=standard" in script) == (mode == "--use_deepspeed")
    # envrun pins ranks only where accelerate starts them with torch.distributed.run
    assert ("--no_python" in words) == (mode in ("--use_fsdp", "--use_megatron_lm"))
    if mode in ("--cpu", "--tpu"):
        assert "--num_processes=\"$((ENVRUN_NNODES * 1))\"" in script
        assert dict(p.env)["OMP_NUM_THREADS"] == "40"


def test_accelerate_cpu_flag_is_warned_about() -> None:
    p = plan("srun", "-N", "2", "accelerate", "launch", "--cpu", "train.py")
    assert any("accelerate launch --cpu starts one process per node and gives it no rank" in w for w in p.warnings)
    assert "ACCELERATE_USE_CPU" not in dict(p.env)


def test_accelerate_on_cpu_only_nodes_uses_gloo_processes(tmp_path: Path) -> None:
    p = plan("srun", "accelerate", "launch", "examples/accelerate_ddp.py")
    assert dict(p.env)["ACCELERATE_USE_CPU"] == "true"
    got = run_program_shim(p.argv, "envrun-accelerate", tmp_path, STEP)
    assert "--num_processes=4" in got and "--multi_gpu" in got  # 2 nodes x 2 CPUs
    assert "ACCELERATE_USE_CPU" not in dict(plan("srun", "accelerate", "launch", "x.py",
                                                 environ={"ACCELERATE_USE_CPU": "false"}).env)


def test_one_process_per_node_gets_multi_gpu_only_on_several_nodes(tmp_path: Path) -> None:
    one_cpu = HostNode(cpus=1, why={"cpus": "1 CPU in this process's affinity"})
    p = plan("srun", "accelerate", "launch", "x.py", host=one_cpu)
    for nodes, expected in (("1", False), ("3", True)):
        got = run_program_shim(p.argv, "envrun-accelerate", tmp_path, {**STEP, "ENVRUN_NNODES": nodes})
        assert ("--multi_gpu" in got) == expected and f"--num_processes={nodes}" in got


def test_accelerate_with_an_overlay_runs_under_the_overlays_python(tmp_path: Path) -> None:
    p = plan("srun", "accelerate", "launch", "x.py", overlays=ONE_OVERLAY)
    got = run_program_shim(p.argv, "envrun-accelerate", tmp_path, STEP)
    assert got[:3] == ["python", "-m", "accelerate.commands.launch"]
    assert "accelerate" not in p.argv


def test_accelerate_reasons_name_every_added_option() -> None:
    reasons = "\n".join(plan("srun", "accelerate", "launch", "x.py", system="juwels-booster", environ=JUWELS_2_NODES).reasons)
    for option in ("--num_machines=$SLURM_STEP_NUM_NODES", "--machine_rank=$SLURM_NODEID",
                   "--main_process_ip=<first node of the step>i", "--main_process_port=", "--num_processes=<nodes> x 4",
                   "--multi_gpu:", "--ntasks-per-node=1: accelerate launch starts the training processes itself"):
        assert option in reasons


def test_a_path_to_accelerate_is_quoted_into_the_shim(tmp_path: Path) -> None:
    p = plan("srun", "/opt/my env/bin/accelerate", "launch", "x.py")
    script, _ = launcher_shim(p.argv, "envrun-accelerate")
    assert script.startswith("exec '/opt/my env/bin/accelerate' launch --num_machines=")


@pytest.mark.parametrize("extra", [("--ntasks-per-node=2",), ("-n", "4")])
def test_accelerate_needs_one_task_per_node(extra: tuple[str, ...]) -> None:
    with pytest.raises(UsageError, match=r"tasks per node, but accelerate launch runs once per node") as info:
        plan("srun", "-N", "2", *extra, "-c", "1", "accelerate", "launch", "x.py")
    assert "envrun runs one task per node" in info.value.hint


# -- deepspeed ------------------------------------------------------------------------------------------------


def test_deepspeed_runs_the_per_node_launcher(tmp_path: Path) -> None:
    p = plan("srun", "deepspeed", "-m", "--num_gpus", "2", "pkg.train", *TRICKY, system="mahti", environ=MAHTI_2_NODES)
    got = run_program_shim(p.argv, "envrun-deepspeed", tmp_path, {**STEP, "ENVRUN_WORLD_INFO": "e30="})
    assert got == ["python", "-m", "deepspeed.launcher.launch", "--world_info=e30=", "--node_rank=1", "--master_addr=g1101",
                   "--master_port=23456", "--module", "pkg.train", *TRICKY]
    assert dict(p.env)["OMP_NUM_THREADS"] == "64"  # 128 CPUs / the 2 GPUs asked for


def test_deepspeed_options_that_travel_on_are_kept(tmp_path: Path) -> None:
    user = ("--master_port", "29600", "--master_addr=10.1.1.1", "--no_local_rank", "--enable_each_rank_log", "logs",
            "--bind_cores_to_rank", "--no_python", "./run.sh")
    p = plan("srun", "deepspeed", *user, "x", system="mahti", environ=MAHTI_2_NODES)
    got = run_program_shim(p.argv, "envrun-deepspeed", tmp_path, {**STEP, "ENVRUN_WORLD_INFO": "e30="})
    assert got == ["python", "-m", "deepspeed.launcher.launch", "--world_info=e30=", "--node_rank=1", *user, "x"]


@pytest.mark.parametrize("option", [("--hostfile=/job/hostfile",), ("-H", "hosts"), ("--include", "g1101@g1102:0,1"),
                                    ("-e", "g1102"), ("--num_nodes", "2"), ("--launcher", "slurm"), ("--ssh_port=22",),
                                    ("--no_ssh",), ("--force_multi",), ("--node_rank", "0"), ("--launcher_args", "-x")])
def test_deepspeed_runner_options_for_nodes_and_ssh_are_refused(option: tuple[str, ...]) -> None:
    with pytest.raises(UsageError) as info:
        plan("srun", "deepspeed", *option, "train.py", system="mahti", environ=MAHTI_2_NODES)
    assert str(info.value).startswith(f"deepspeed {option[0]} under srun: the Slurm allocation decides which nodes and GPUs run")
    assert info.value.hint.startswith(f"drop {option[0]}; choose nodes and GPUs with srun/sbatch options (-N, --nodelist")
    assert "--num_gpus N" in info.value.hint


@pytest.mark.parametrize("option", [("--autotuning", "tune"), ("--elastic_training",), ("--save_pid",), ("--bogus",)])
def test_deepspeed_runner_options_the_launcher_lacks_are_refused(option: tuple[str, ...]) -> None:
    with pytest.raises(UsageError, match="which has no such option") as info:
        plan("srun", "deepspeed", *option, "train.py", system="mahti", environ=MAHTI_2_NODES)
    assert "run `envrun deepspeed ...` without srun" in info.value.hint


def test_deepspeed_gpus_beyond_the_node_are_refused() -> None:
    with pytest.raises(UsageError, match=r"your --num_gpus=8 but this launch has 4 GPUs per node") as info:
        plan("srun", "deepspeed", "--num_gpus=8", "train.py", system="mahti", environ=MAHTI_2_NODES)
    assert info.value.hint == "use at most 4 per node"
    with pytest.raises(UsageError, match=r"--num_gpus=two is not a positive number"):
        plan("srun", "deepspeed", "--num_gpus=two", "train.py", system="mahti", environ=MAHTI_2_NODES)


@pytest.mark.parametrize("nodes", [1, 3])
def test_deepspeed_world_info_is_made_in_the_step(tmp_path: Path, nodes: int) -> None:
    p = plan("srun", "deepspeed", "train.py", system="juwels-booster", environ=JUWELS_2_NODES)
    hosts = [f"jwb{97 + i:04d}" for i in range(nodes)]
    got = run_host_shim_with(p.argv, tmp_path, {"SLURM_STEP_NUM_NODES": str(nodes), "SLURM_NODEID": str(nodes - 1),
                                                "SLURM_JOB_ID": "11112222", "SLURM_STEP_ID": "0", "SLURM_NTASKS": "2",
                                                "SLURM_STEP_NODELIST": "jwb[0097-0099]"}, hosts)
    world_info = json.loads(base64.urlsafe_b64decode(got["ENVRUN_WORLD_INFO"]))
    assert world_info == {f"node{i}": [0, 1, 2, 3] for i in range(nodes)}
    assert list(world_info) == [f"node{i}" for i in range(nodes)]  # deepspeed indexes the keys by --node_rank
    assert (got["ENVRUN_NNODES"], got["ENVRUN_NODE_RANK"]) == (str(nodes), str(nodes - 1))
    assert got["ENVRUN_MASTER_ADDR"] == "jwb0097i" and got["ENVRUN_MASTER_PORT"] == str(20000 + (11112222 * 16) % 12000)
    assert "SLURM_NTASKS" not in got


def test_deepspeed_world_info_survives_many_nodes(tmp_path: Path) -> None:
    """base64 wraps at 76 columns: the value must stay one word."""
    p = plan("srun", "deepspeed", "train.py", system="mahti", environ=MAHTI_2_NODES)
    got = run_host_shim_with(p.argv, tmp_path, {"SLURM_STEP_NUM_NODES": "40", "SLURM_NODEID": "0"}, ["g1101"])
    assert len(json.loads(base64.urlsafe_b64decode(got["ENVRUN_WORLD_INFO"]))) == 40


# -- without srun: the program as it is ----------------------------------------------------------------------


@pytest.mark.parametrize("command", [("accelerate", "launch", "--multi_gpu", "train.py"), ("deepspeed", "--hostfile=h", "t.py")])
def test_without_srun_the_program_is_left_as_it_is(command: tuple[str, ...]) -> None:
    p = plan(*command)
    assert words_after(p.argv, "envrun-task")[1:] == command
    assert "srun" not in p.argv and "ENVRUN_NNODES" not in "".join(p.argv)


def test_other_accelerate_commands_are_plain_programs() -> None:
    p = plan("srun", "accelerate", "env")
    assert words_after(p.argv, "envrun-task")[1:] == ("accelerate", "env")
    assert "envrun-accelerate" not in p.argv


def test_lumi_accelerate_pins_ranks_to_their_gcds_cores() -> None:
    p = plan("srun", "accelerate", "launch", "train.py", system="lumi-g", environ=LUMI_2_NODES)
    assert dict(p.env)["ENVRUN_RANK_CORES"].startswith("0:49,50,51,52,53,54,55;1:57,")
    assert dict(p.env)["OMP_NUM_THREADS"] == "7"
