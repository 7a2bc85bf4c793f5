"""`envrun sbatch --check`: one test per pitfall rule, on scripts in tests/fixtures/batch/bad-*.sh. Each asserts
the finding's line and what it says; the why cites the recipe (or the public document) and the fix is concrete."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from envbuild.recipes.loadrecipe import load_recipe
from envbuild.shared.errors import UsageError
from envbuild.slurm.check.pitfalls import check_script, check_script_file, render_report
from envbuild.slurm.check.rulebase import Finding

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "batch"


def findings(name: str, system: str, environ: dict[str, str] | None = None) -> list[Finding]:
    return list(check_script((FIXTURES / name).read_text(), load_recipe(system), environ or {}).findings)


def only(name: str, system: str) -> Finding:
    found = findings(name, system)
    assert len(found) == 1, found
    return found[0]


def check_text(text: str, system: str, environ: dict[str, str] | None = None) -> list[Finding]:
    return list(check_script(text, load_recipe(system), environ or {}).findings)


def test_per_task_gpu_options_on_lumi() -> None:
    sbatch, srun = findings("bad-lumi-g-gpus-per-task.sh", "lumi-g")
    assert sbatch.line == 6
    assert sbatch.what == "--gpus-per-task=1: lumi-g forbids this option without --gres-flags=allow-task-sharing"
    assert "break GPU-to-GPU communication" in sbatch.why
    assert sbatch.source.startswith("recipes/lumi-g.yaml:") and "launch.forbidden_srun_options.0" in sbatch.source
    assert sbatch.fix.startswith("--gpus-per-node=8 (the GPUs per node) instead, and select each task's GPU with "
                                 "ROCR_VISIBLE_DEVICES=$SLURM_LOCALID")
    assert srun.line == 9
    assert srun.what.startswith("srun --ntasks-per-gpu=1: lumi-g forbids")
    assert srun.fix.startswith("--ntasks-per-node=8 with --gpus-per-node=8 instead")


def test_per_task_gpu_options_are_fine_with_task_sharing_and_elsewhere() -> None:
    assert findings("lumi-g-gpus-per-task-sharing.sh", "lumi-g") == []
    text = (FIXTURES / "bad-lumi-g-gpus-per-task.sh").read_text().replace("--partition=standard-g", "--partition=gpu")
    text = text.replace("project_465000000", "project_2001234").replace("--ntasks-per-node=8", "--ntasks-per-node=4")
    assert [f for f in check_text(text, "puhti") if "forbids" in f.what] == []  # no such rule on Puhti


def test_cpus_above_the_usable_cores() -> None:
    finding = only("bad-lumi-g-cpus.sh", "lumi-g")
    assert finding.line == 6
    assert finding.what == "--ntasks-per-node=8 x -c 8 is 64 CPUs per node, more than the 56 a lumi-g node gives jobs"
    assert "8 of them reserved for the operating system: 56 usable" in finding.why
    assert "node.usable_cores" in finding.source
    assert finding.fix == "--cpus-per-task=7 (8 tasks x 7 = 56 CPUs)"


def test_cpus_count_hardware_threads_on_juwels() -> None:
    text = (FIXTURES / "juwels-booster-2-nodes.sh").read_text().replace("--cpus-per-task=24", "--cpus-per-task=48")
    (finding,) = check_text(text, "juwels-booster")
    assert finding.line == 8
    assert "192 CPUs per node, more than the 96" in finding.what
    assert "2 hardware threads per core, so 48 cores are 96 CPUs" in finding.why
    assert "node.slurm_cpus_per_core" in finding.source
    assert finding.fix == "--cpus-per-task=24 (4 tasks x 24 = 96 CPUs)"


def test_memory_above_the_node() -> None:
    finding = only("bad-lumi-g-memory.sh", "lumi-g")
    assert finding.line == 8
    assert finding.what == "--mem 512G is more memory than a lumi-g node has"
    assert finding.why == "a lumi-g node gives jobs 480G of memory" and "node.memory_gb" in finding.source
    assert finding.fix == "--mem=480G (the whole node's)"
    for fine in ("--mem 480G", "--mem 0", "--mem 400000"):
        text = (FIXTURES / "bad-lumi-g-memory.sh").read_text().replace("--mem 512G", fine)
        assert check_text(text, "lumi-g") == [], fine


def test_memory_per_gpu_times_the_gpus() -> None:
    finding = only("bad-puhti-mem-per-gpu.sh", "puhti")
    assert finding.line == 7
    assert finding.what == "--mem-per-gpu=100G x 4 GPUs is 400G per node, more than a puhti node has"
    assert finding.why == "a puhti node gives jobs 373G of memory"
    assert finding.fix == "--mem-per-gpu=95G"


def test_memory_per_cpu_times_the_cpus() -> None:
    text = (FIXTURES / "puhti-4-gpus-torchrun.sh").read_text().replace("--mem=320G", "--mem-per-cpu=10G")
    (finding,) = check_text(text, "puhti")
    assert finding.line == 7
    assert finding.what == "--mem-per-cpu=10G x 40 CPUs is 400G per node, more than a puhti node has"
    assert finding.fix == "--mem-per-cpu=9548M"


def test_gpus_above_the_node() -> None:
    finding = only("bad-puhti-gpus.sh", "puhti")
    assert finding.line == 7
    assert finding.what == "--gres=gpu:v100:8,nvme:100 is 8 GPUs per node, but a puhti node has 4"
    assert "node.gpus" in finding.source
    assert finding.fix == "--nodes=2 --gres=gpu:v100:4,nvme:100 (8 GPUs in all)"


def test_gpus_total_on_one_node() -> None:
    text = "#!/bin/bash\n#SBATCH -A project_465000000\n#SBATCH -p standard-g\n#SBATCH --gpus=16\n#SBATCH -N 1\n"
    (finding,) = check_text(text, "lumi-g")
    assert (finding.line, finding.what) == (4, "--gpus=16 is 16 GPUs per node, but a lumi-g node has 8")
    assert finding.fix == "--nodes=2 --gpus-per-node=8 (16 GPUs in all)"
    # without --nodes, Slurm takes as many nodes as 16 GPUs need
    assert check_text(text.replace("#SBATCH -N 1\n", ""), "lumi-g") == []


def test_tasks_without_nodes_spread_over_nodes() -> None:
    text = "#!/bin/bash\n#SBATCH -A project_465000000\n#SBATCH -p standard-g\n#SBATCH -n 16\n#SBATCH -c 7\n" \
        "#SBATCH --gpus-per-node=8\n"
    assert check_text(text, "lumi-g") == []  # two nodes of 8 x 7 CPUs
    (finding,) = check_text(text.replace("-c 7", "-c 60"), "lumi-g")  # one task cannot span nodes
    assert (finding.line, finding.what) == (5, "-c 60 (one task) is 60 CPUs per node, more than the 56 a lumi-g node "
                                               "gives jobs")
    assert finding.fix == "--cpus-per-task=56"


def test_partition_gpu_and_time_limits() -> None:
    gpus, time = findings("bad-mahti-gpusmall-4-gpus.sh", "mahti")
    assert gpus.line == 7
    assert gpus.what == "--gres=gpu:a100:4: partition gpusmall takes at most 2 GPUs per node"
    assert "partitions.gpusmall" in gpus.source
    assert gpus.fix == "--partition=gpumedium, or --gres=gpu:a100:2"
    assert time.line == 8
    assert time.what == "--time=2-00:00:00: partition gpusmall allows at most 1-12:00:00"
    assert time.fix == "--time=1-12:00:00"


def test_partition_node_limit() -> None:
    finding = only("bad-lumi-g-small-g-8-nodes.sh", "lumi-g")
    assert finding.line == 4
    assert finding.what == "--nodes=8: partition small-g takes at most 4 node(s)"
    assert finding.fix == "--partition=standard-g (whole nodes: each is billed for all 8 GPUs), or --nodes=4"


def test_partition_time_limit_suggests_a_longer_partition() -> None:
    text = (FIXTURES / "puhti-1-gpu.sh").read_text().replace("--partition=gpu", "--partition=gputest")
    (finding,) = check_text(text, "puhti")
    assert (finding.line, finding.what) == (8, "--time=01:00:00: partition gputest allows at most 00:15:00")
    assert finding.fix == "--time=00:15:00, or --partition=gpu"


def test_bad_time_syntax() -> None:
    text = (FIXTURES / "puhti-1-gpu.sh").read_text().replace("--time=01:00:00", "--time=1h")
    (finding,) = check_text(text, "puhti")
    assert (finding.line, finding.what) == (8, "--time=1h is not a Slurm time")


def test_per_task_launch_with_fewer_tasks_than_gpus() -> None:
    # one process on one node may drive all four GPUs itself (DataParallel, a model spread over them): not known
    assert findings("bad-puhti-srun-python-4-gpus.sh", "puhti") == []
    text = (FIXTURES / "bad-puhti-srun-python-4-gpus.sh").read_text().replace("--ntasks=1", "--ntasks=2")
    (finding,) = check_text(text.replace("--cpus-per-task=40", "--cpus-per-task=10"), "puhti")  # two ranks
    assert finding.line == 11
    assert finding.what == ("srun starts 2 python process(es) per node for 4 GPUs per node (2 GPU(s) idle, unless "
                            "train.py starts one process per GPU itself)")
    assert finding.fix.startswith("--ntasks-per-node=4 --cpus-per-task=10 in #SBATCH (one task per GPU)")


def test_per_task_launch_on_lumi_cites_the_per_task_gpu_variable() -> None:
    text = (FIXTURES / "lumi-g-full-node-8-tasks.sh").read_text().replace("--ntasks-per-node=8", "--ntasks-per-node=4")
    (finding,) = check_text(text, "lumi-g")
    assert (finding.line, finding.what) == (30, "srun starts 4 python process(es) per node for 8 GPUs per node "
                                                "(4 GPU(s) idle, unless train.py starts one process per GPU itself)")
    assert "launch.per_task_gpu_env.ROCR_VISIBLE_DEVICES" in finding.source


def test_torchrun_with_several_tasks_per_node() -> None:
    finding = only("bad-lumi-g-torchrun-8-tasks.sh", "lumi-g")
    assert finding.line == 12  # where the continued command starts
    assert finding.what == "srun starts torchrun 8 times per node"
    assert finding.fix == "--ntasks-per-node=1 --cpus-per-task=56 in #SBATCH (or on the srun line): one torchrun per node"


def test_torchrun_step_with_its_own_task_count_is_fine() -> None:
    assert findings("lumi-g-torchrun-step-override.sh", "lumi-g") == []
    text = (FIXTURES / "lumi-g-torchrun-step-override.sh").read_text().replace("--ntasks-per-node=1 ", "-n 4 ")
    (finding,) = check_text(text, "lumi-g")
    assert (finding.line, finding.what) == (12, "srun starts torchrun 2 times per node")
    assert "on the srun line" in finding.fix


def test_torchrun_without_srun_on_several_nodes() -> None:
    finding = only("bad-mahti-torchrun-no-srun.sh", "mahti")
    assert finding.line == 10
    assert finding.what == "torchrun without srun runs on the first of the job's 2 nodes only"
    assert finding.fix == "srun --ntasks-per-node=1 torchrun ... (one per node)"


def test_missing_account() -> None:
    finding = only("bad-puhti-no-account.sh", "puhti")
    assert finding.line == 2
    assert finding.what == "no --account: puhti needs one for every job"
    assert "batch.account_required" in finding.source
    assert finding.fix == "#SBATCH --account=project_2001234 (your project)"


def test_missing_account_with_sbatch_account_set_is_a_note() -> None:
    text = (FIXTURES / "bad-puhti-no-account.sh").read_text()
    report = check_script(text, load_recipe("puhti"), {"SBATCH_ACCOUNT": "project_2009999"})
    assert report.findings == ()
    assert report.notes == ("no #SBATCH --account; sbatch takes it from $SBATCH_ACCOUNT=project_2009999 here, but not "
                            "where that variable is unset",)
    assert "job.sh: note: no #SBATCH --account" in render_report("job.sh", report)


def test_retired_partition() -> None:
    finding = only("bad-lumi-g-eap.sh", "lumi-g")
    assert finding.line == 3
    assert finding.what == "partition eap no longer exists on lumi-g"
    assert "closed when LUMI-G entered production" in finding.why
    assert "batch.retired_partitions.eap" in finding.source
    assert finding.fix == "--partition=standard-g"


def test_unknown_partition() -> None:
    finding = only("bad-puhti-unknown-partition.sh", "puhti")
    assert finding.line == 3
    assert finding.what == "puhti has no partition gpusmall"
    assert finding.why == ("puhti's partitions are gpu, gputest (GPU); test, interactive, small, large, longrun, "
                           "hugemem, hugemem_longrun (CPU)")
    assert finding.fix == "--partition=gpu"


def test_unknown_partition_is_fine_without_site_facts() -> None:
    assert check_text("#!/bin/bash\n#SBATCH -p anything\nsrun hostname\n", "local") == []


def test_srun_without_the_jobs_cpus_per_task_on_juwels() -> None:
    """Checked away from the cluster, its Slurm release is not known: the finding is a condition on it."""
    finding = only("bad-juwels-no-srun-cpus.sh", "juwels-booster")
    assert finding.line == 11
    assert finding.what == ("if this cluster's Slurm is 22.05 to 23.02, srun does not get the job's --cpus-per-task=24 "
                            "(and 1 more srun line(s))")
    assert "launch.srun_env_from.SRUN_CPUS_PER_TASK" in finding.source and "RELEASE_NOTES" in finding.source
    assert finding.fix.startswith("srun --cpus-per-task=$SLURM_CPUS_PER_TASK (right on every release)")


def test_srun_cpus_per_task_given_on_the_line_or_exported_later() -> None:
    text = (FIXTURES / "bad-juwels-no-srun-cpus.sh").read_text()
    passed = text.replace("srun python train.py", "srun -c 24 python train.py")
    (finding,) = check_text(passed, "juwels-booster")
    assert finding.line == 12 and "(and" not in finding.what
    exported_late = text + 'export SRUN_CPUS_PER_TASK="$SLURM_CPUS_PER_TASK"\n'
    assert [f.line for f in check_text(exported_late, "juwels-booster")] == [11]


def test_directive_after_the_first_command() -> None:
    first, second = findings("bad-puhti-late-directive.sh", "puhti")
    assert (first.line, second.line) == (7, 8)
    assert first.what == "#SBATCH --gres=gpu:v100:1 comes after the first command (line 6): sbatch ignores it"
    assert first.fix == "move it above line 6"


def test_shell_variable_in_a_directive() -> None:
    text = "#!/bin/bash\n#SBATCH --nodes=$NODES\nsrun hostname\n"
    (finding,) = check_text(text, "local")
    assert (finding.line, finding.what) == (2, "--nodes=$NODES: not a number (a shell variable)")


def test_core_masks_on_a_shared_partition() -> None:
    finding = only("bad-lumi-g-mask-small-g.sh", "lumi-g")
    assert finding.line == 11
    assert finding.what == "srun --cpu-bind=mask_cpu:... on partition small-g, which shares nodes"
    assert "node.gpu_cores" in finding.source and "partitions.small-g" in finding.source
    assert finding.fix.startswith("#SBATCH --exclusive, or --partition=standard-g")
    exclusive = (FIXTURES / "bad-lumi-g-mask-small-g.sh").read_text().replace("#SBATCH --nodes=1",
                                                                               "#SBATCH --nodes=1 --exclusive")
    assert check_text(exclusive, "lumi-g") == []


def test_local_recipe_applies_only_the_generic_rules() -> None:
    text = "\n".join([
        "#!/bin/bash", "#SBATCH -N 2", "#SBATCH --ntasks-per-node=4", "#SBATCH -c 999", "#SBATCH --mem=9999G",
        "#SBATCH --gres=gpu:4", "srun torchrun --nproc-per-node=4 train.py",
    ])
    (finding,) = check_text(text, "local")  # no node facts: CPUs, memory and GPUs are not judged
    assert (finding.line, finding.what) == (7, "srun starts torchrun 4 times per node")


def test_report_format_and_exit_code(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(FIXTURES)  # where the job would start: its program files are there
    out = io.StringIO()
    assert check_script_file(str(FIXTURES / "bad-lumi-g-gpus-per-task.sh"), load_recipe("lumi-g"), out, {}) == 1
    lines = out.getvalue().splitlines()
    path = str(FIXTURES / "bad-lumi-g-gpus-per-task.sh")
    assert lines[0] == f"{path}: lumi-g rules"  # whose rules ran, first
    assert lines[1] == f"{path}:6: --gpus-per-task=1: lumi-g forbids this option without --gres-flags=allow-task-sharing"
    assert lines[2].startswith("  why: per-task GPU cgroups") and lines[2].endswith("launch.forbidden_srun_options.0)")
    assert lines[3].startswith("  fix: --gpus-per-node=8")
    assert lines[4].startswith(f"{path}:9: ")
    assert lines[-1] == f"{path}: 2 findings for lumi-g"
    clean = io.StringIO()
    assert check_script_file(str(FIXTURES / "puhti-1-gpu.sh"), load_recipe("puhti"), clean, {}) == 0
    assert clean.getvalue() == f"{FIXTURES / 'puhti-1-gpu.sh'}: clean for puhti (7 #SBATCH lines, 1 srun line checked)\n"


def test_missing_or_unreadable_script_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError) as missing:
        check_script_file(str(tmp_path / "nope.sh"), load_recipe("puhti"), io.StringIO(), {})
    assert "no such file" in missing.value.message and missing.value.hint
    with pytest.raises(UsageError) as directory:
        check_script_file(str(tmp_path), load_recipe("puhti"), io.StringIO(), {})
    assert "is a directory" in directory.value.message
