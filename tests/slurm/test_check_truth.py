"""`envrun sbatch --check` reads scripts as the shell and sbatch do and applies each rule only where its reason
holds (issue 29). One test per class of the issue, each in the shape of public course and centre scripts (LUMI AI
guide and workshop, CSC user guide, JSC courses; written here, not copied). Each failed on the code before
issue 29 (checked against 90b7bb7 in a worktree)."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path

import pytest

from envbuild.recipes.loadrecipe import load_recipe
from envbuild.slurm.check.parse import parse_script
from envbuild.slurm.check.pitfalls import check_script, check_script_file, render_report
from envbuild.slurm.check.programs import classify_program
from envbuild.slurm.check.rulebase import Finding
from envbuild.slurm.check.shape import JobShape
from tests.support.cputime import cpu_seconds

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "batch"


def check(text: str, system: str | None, environ: dict[str, str] | None = None) -> list[Finding]:
    recipe = load_recipe(system) if system else None
    return list(check_script(text, recipe, environ or {}).findings)


def rules(text: str, system: str | None, environ: dict[str, str] | None = None) -> list[tuple[str, int]]:
    # (what it says, where a finding has no rule id: so that these tests fail on the code before issue 29 for
    # the finding itself, not for the missing attribute)
    return [(getattr(finding, "rule", finding.what), finding.line) for finding in check(text, system, environ)]


LUMI_HEAD = """#!/bin/bash
#SBATCH --account=project_465000000
#SBATCH --partition=standard-g
#SBATCH --nodes=2
#SBATCH --gpus-per-node=8
#SBATCH --time=02:00:00
"""


# --- what a line runs: its words, never substrings --------------------------------------------------------


def test_deepspeed_as_a_library_in_a_bash_c_string_is_python() -> None:
    # the LUMI workshop's shape: one Python per GCD, ranks from Slurm, DeepSpeed only a library
    text = LUMI_HEAD + """#SBATCH --ntasks-per-node=8
#SBATCH --cpus-per-task=7
#SBATCH --mem=480G

SIF=/appl/local/containers/sif-images/lumi-pytorch.sif
srun singularity run $SIF bash -c 'export RANK=$SLURM_PROCID LOCAL_RANK=$SLURM_LOCALID; \\
    python train.py --deepspeed --deepspeed_config ds_config.json'
"""
    assert rules(text, "lumi-g") == []
    (srun,) = parse_script(text).sruns
    assert (srun.program.kind, srun.program.via) == ("python", "singularity run, bash -c")


@pytest.mark.parametrize(("words", "kind"), [
    ("python train.py --deepspeed", "python"),
    ("python -m torch.distributed.run --nproc-per-node=8 train.py", "torchrun"),
    ("apptainer_wrapper exec python3 train.py", "python"),  # CSC's wrapper: the image is $SING_IMAGE
    ("singularity_wrapper exec torchrun --nproc-per-node=4 train.py", "torchrun"),
    ("env OMP_NUM_THREADS=7 accelerate launch train.py", "accelerate"),
    ("numactl --cpunodebind=0 python train.py", "python"),
    ("deepspeed --num_gpus=4 train.py", "deepspeed"),
    ("echo torchrun is not run here", "other"),
    ("$CMD", "unknown"),
    ("mpirun -np 8 python train.py", "unknown"),
    ("eval $LAUNCH", "unknown"),
])
def test_programs_from_words(words: str, kind: str) -> None:
    assert classify_program(tuple(words.split())).kind == kind


def test_what_cannot_be_known_is_an_info_not_a_guess() -> None:
    text = LUMI_HEAD + "#SBATCH --ntasks-per-node=8\n#SBATCH --cpus-per-task=7\n\nsrun $CMD\nmpirun -np 16 ./app\n"
    found = check(text, "lumi-g")
    assert [(f.rule, f.level, f.line) for f in found] == [("program_unknown", "info", 10),
                                                          ("program_unknown", "info", 11)]
    assert "not known" in found[0].what and "nothing to change" in found[0].fix
    report = check_script(text, load_recipe("lumi-g"), {})
    assert report.problems == 0 and "clean for lumi-g" in render_report("job.sh", report)  # infos are no problem


# --- sbatch's own option forms -------------------------------------------------------------------------------


def test_tasks_per_node_is_ntasks_per_node() -> None:
    # the LUMI workshop's env_setup script writes --tasks-per-node, sbatch's documented synonym
    text = LUMI_HEAD.replace("--nodes=2", "--nodes=1") + """#SBATCH --tasks-per-node=8
#SBATCH --cpus-per-task=7
#SBATCH --mem=480G

srun singularity exec $SIF bash -c "python train.py"
"""
    assert rules(text, "lumi-g") == []
    assert JobShape(parse_script(text)).tasks_per_node() == 8


@pytest.mark.parametrize(("lines", "expected"), [
    (("-N2", "-n 16", "-c 7", "-G 16"), {"nodes": 2, "tasks": 8, "cpus": 7, "gpus": 8}),
    (("--nodes 2", "--ntasks-per-node 4", "--gres=gpu:4"), {"nodes": 2, "tasks": 4, "cpus": None, "gpus": 4}),
    (("--gres=gpu:a100:4", "--ntasks-per-gpu=1"), {"nodes": 1, "tasks": 4, "cpus": None, "gpus": 4}),
    (("--gpus=a100:8", "-N 2"), {"nodes": 2, "tasks": None, "cpus": None, "gpus": 4}),
])
def test_option_spellings(lines: tuple[str, ...], expected: dict[str, int | None]) -> None:
    job = JobShape(parse_script("#!/bin/bash\n" + "".join(f"#SBATCH {line}\n" for line in lines)))
    assert {"nodes": job.nodes, "tasks": job.tasks_per_node(), "cpus": job.cpus_per_task(),
            "gpus": job.gpus_per_node()} == expected


def test_srun_options_in_every_spelling() -> None:
    text = "#!/bin/bash\nsrun -n2 --tasks-per-node 1 -c8 --cpu_bind=cores hostname\n"
    (srun,) = parse_script(text).sruns
    assert srun.options == ("--ntasks=2", "--ntasks-per-node=1", "--cpus-per-task=8", "--cpu-bind=cores")
    assert srun.program.words == ("hostname",)


# --- every rule applies only where its reason holds ------------------------------------------------------------


def test_per_task_gpus_with_one_task_per_node_hide_nothing() -> None:
    text = LUMI_HEAD.replace("--gpus-per-node=8", "--gpus-per-task=8") + """#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=56
#SBATCH --mem=480G

srun singularity exec $SIF torchrun --nnodes=2 --nproc-per-node=8 train.py
"""
    assert rules(text, "lumi-g") == []
    eight = text.replace("--gpus-per-task=8", "--gpus-per-task=1").replace("--ntasks-per-node=1", "--ntasks-per-node=8")
    eight = eight.replace("--cpus-per-task=56", "--cpus-per-task=7").replace("torchrun --nnodes=2 --nproc-per-node=8",
                                                                          "python")
    assert rules(eight, "lumi-g") == [("forbidden_options", 5)]


def test_srun_cpu_inheritance_only_when_the_job_asks_for_more_than_one() -> None:
    text = (FIXTURES / "bad-juwels-no-srun-cpus.sh").read_text()
    assert "srun_inherits" in [rule for rule, _line in rules(text, "juwels-booster")]
    one = text.replace("--cpus-per-task=24", "--cpus-per-task=1")
    assert "srun_inherits" not in [rule for rule, _line in rules(one, "juwels-booster")]


def test_a_cpu_job_on_mahti_medium_is_no_gpu_job() -> None:
    # a Ray job on two CPU nodes, in the shape of CSC's Mahti examples
    text = """#!/bin/bash
#SBATCH --account=project_2001234
#SBATCH --partition=medium
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=128
#SBATCH --time=04:00:00

srun python ray_tune.py
"""
    assert rules(text, "mahti") == []
    (wrong,) = check(text.replace("--partition=medium", "--partition=mediun"), "mahti")
    assert wrong.rule == "partition_exists"
    assert "gpu" not in wrong.fix and "medium" in wrong.fix  # never a GPU partition for a CPU job


def test_launcher_tasks_only_for_a_line_that_runs_the_launcher() -> None:
    text = LUMI_HEAD + "#SBATCH --ntasks-per-node=8\n#SBATCH --cpus-per-task=7\n\n" \
        "srun python train.py --launcher torchrun --deepspeed\n"
    assert rules(text, "lumi-g") == []
    launcher = text.replace("srun python train.py --launcher torchrun --deepspeed", "srun torchrun train.py")
    assert rules(launcher, "lumi-g") == [("launcher_tasks", 10)]


# --- what was missed -------------------------------------------------------------------------------------------


def test_a_gpu_partition_without_a_gpu_request() -> None:
    text = """#!/bin/bash
#SBATCH --account=training2426
#SBATCH --partition=booster
#SBATCH --nodes=1
#SBATCH --time=06:00:00

srun python finetune.py
"""
    (finding,) = check(text, "juwels-booster")
    assert (finding.rule, finding.line, finding.level) == ("gpu_partition_without_gpus", 3, "warning")
    assert finding.fix.startswith("--gres=gpu:4") and finding.edit == (3, "#SBATCH --partition=booster --gres=gpu:4")


def test_one_gpu_on_a_partition_billed_by_whole_nodes() -> None:
    text = """#!/bin/bash
#SBATCH --account=project_465000000
#SBATCH --partition=standard-g   # whole nodes
#SBATCH --nodes=1
#SBATCH --gpus-per-node=1
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=7
#SBATCH --mem=60G
#SBATCH --time=01:00:00

srun python train.py
"""
    (finding,) = check(text, "lumi-g")
    assert (finding.rule, finding.line) == ("partial_gpus_on_billed_node", 3)
    assert "pays for 8 GPUs per node and uses 1" in finding.what and "partitions.standard-g" in finding.source
    assert finding.fix.startswith("--partition=small-g")
    assert finding.edit == (3, "#SBATCH --partition=small-g   # whole nodes")
    fixed = text.replace("standard-g", "small-g")
    assert rules(fixed, "lumi-g") == []


def test_merge_conflict_markers_and_syntax_errors() -> None:
    text = (FIXTURES / "puhti-1-gpu.sh").read_text().rstrip("\n").split("\n")
    conflicted = "\n".join([*text[:-1], "<<<<<<< HEAD", text[-1], "=======", text[-1] + " --lr 3e-4",
                            ">>>>>>> tune", ""])
    (finding,) = check(conflicted, "puhti")
    assert (finding.rule, finding.level, finding.line) == ("shell_syntax", "error", len(text))
    broken = "\n".join([*text, "if [ -d data ]; then", "  echo ok", ""])  # no fi
    (finding,) = check(broken, "puhti")
    assert finding.rule == "shell_syntax" and "bash cannot parse" in finding.what


def test_a_command_above_the_sbatch_lines() -> None:
    text = "#!/bin/bash\nset -euo pipefail\n" + "".join(
        f"{line}\n" for line in (FIXTURES / "puhti-1-gpu.sh").read_text().split("\n")[1:])
    found = check(text, "puhti")
    assert [(f.rule, f.line) for f in found] == [("commands_above_directives", 2)]
    assert "sbatch ignores all 7 of them" in found[0].what and "set -euo pipefail" in found[0].fix


# --- sites without a recipe --------------------------------------------------------------------------------------


def test_no_recipe_runs_site_independent_rules_and_says_so_first() -> None:
    text = "#!/bin/bash\n#SBATCH -N 2\n#SBATCH --gpus-per-node=4\n#SBATCH -C gpu\n\ntorchrun train.py\n"
    report = check_script(text, None, {"SLURM_CLUSTER_NAME": "perlmutter"})
    assert report.notes[0].startswith("no recipe for this site (SLURM_CLUSTER_NAME=perlmutter): site rules skipped")
    assert [(f.rule, f.line) for f in report.findings] == [("launcher_without_srun", 6)]
    out = render_report("job.sh", report)
    assert out.splitlines()[0].startswith("job.sh: note: no recipe for this site")
    assert "for local" not in out and out.endswith("job.sh: 1 finding for this site (site rules skipped)\n")


# --- linear time -------------------------------------------------------------------------------------------------


def test_long_scripts_are_read_in_linear_time() -> None:
    # CPU time of this process, not wall time: a loaded CI machine (two cores) must not fail a complexity check
    head = (FIXTURES / "puhti-1-gpu.sh").read_text()
    unclosed = head + "echo 'start\n" + "srun python step.py --arg value \\\n" * 1000 + "\n"  # 43 KB, quote open
    started = time.process_time()
    found = check(unclosed, "puhti")
    assert time.process_time() - started < 2
    assert [f.rule for f in found] == ["shell_syntax"]
    continued = head + "srun python train.py \\\n" + "    --option value \\\n" * 150_000 + "    --last\n"  # 3.5 MB
    started = time.process_time()
    assert check(continued, "puhti", ) == []
    assert time.process_time() - started < 2
    quoted = head + "echo \"step $i\" 'done' >> log.txt\n" * 300_000 + "srun python train.py\n"  # 10 MB
    started = time.process_time()
    script = parse_script(quoted)
    assert time.process_time() - started < 2 and len(script.sruns) == 2


def test_a_10_mb_file_is_answered_in_under_2_seconds(tmp_path: Path) -> None:
    path = tmp_path / "job.sh"
    path.write_text("#!/bin/bash\n" + "echo 'x\n" * 1_250_000)
    started = cpu_seconds()
    with pytest.raises(Exception, match="not a batch script"):
        check_script_file(str(path), load_recipe("puhti"), io.StringIO(), {})
    assert cpu_seconds() - started < 2


# --- the report: JSON, edits ---------------------------------------------------------------------------------------


def test_json_report(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(FIXTURES)  # where the job would start: its program files are there
    out = io.StringIO()
    path = str(FIXTURES / "bad-lumi-g-cpus.sh")
    assert check_script_file(path, load_recipe("lumi-g"), out, {}, site="--system", as_json=True) == 1
    data = json.loads(out.getvalue())
    assert (data["file"], data["system"], data["site_rules"]) == (path, "lumi-g", True)
    (finding,) = data["findings"]
    assert {key: finding[key] for key in ("rule", "level", "line", "edit")} == {
        "rule": "cpus_per_node", "level": "error", "line": 6, "edit": [6, "#SBATCH --cpus-per-task=7"]}
    assert set(finding) >= {"what", "why", "fix"} and data["notes"] == []


SYSTEMS = {"lumi-g": "lumi-g", "puhti": "puhti", "mahti": "mahti", "juwels": "juwels-booster", "local": "local"}


@pytest.mark.parametrize("name", sorted(path.name for path in FIXTURES.glob("*.sh")))
def test_every_offered_edit_removes_its_finding_and_adds_none(name: str) -> None:
    system = next(recipe for prefix, recipe in SYSTEMS.items() if name.removeprefix("bad-").startswith(prefix))
    text = (FIXTURES / name).read_text()
    before = check(text, system)
    for finding in before:
        if finding.edit is None:
            continue
        line, new = finding.edit
        lines = text.split("\n")
        lines[line - 1] = new
        after = [(f.rule, f.line) for f in check("\n".join(lines), system)]
        assert (finding.rule, finding.line) not in after, (name, finding, after)
        assert set(after) <= {(f.rule, f.line) for f in before}, (name, finding, after)


@pytest.mark.parametrize(("words", "kind"), [
    ("python -W ignore -m torch.distributed.run --nproc-per-node=4 train.py", "torchrun"),
    ("python -u -X dev -m accelerate.commands.launch train.py", "accelerate"),
    ("python -uc 'import torch.distributed.run'", "python"),
    ("srun_wrapper.sh python train.py", "unknown"),  # a wrapper that runs python its own way: said, not guessed
])
def test_python_options_before_the_module(words: str, kind: str) -> None:
    assert classify_program(tuple(words.split())).kind == kind


@pytest.mark.parametrize(("written", "meant"), [("6h", "06:00:00"), ("30min", "00:30:00"), ("2days", "2-00:00:00")])
def test_a_time_in_words_gets_its_slurm_form(written: str, meant: str) -> None:
    text = (FIXTURES / "puhti-1-gpu.sh").read_text().replace("--time=01:00:00", f"--time={written}")
    (finding,) = check(text, "puhti")
    assert (finding.rule, finding.fix) == ("time_syntax", f"--time={meant}")
    assert finding.edit == (8, f"#SBATCH --time={meant}")
