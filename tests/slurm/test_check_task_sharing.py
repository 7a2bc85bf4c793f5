"""`envrun sbatch --check` and srun's --gres-flags=allow-task-sharing, the way out of a site's per-task GPU
rule (LUMI-G: --gpus-per-task with several tasks per node): an srun option (srun(1): specific to srun; sbatch
and salloc refuse it), so the fix offered for the #SBATCH option goes on the srun line(s) of the steps that
lack it, never on an #SBATCH line."""

from __future__ import annotations

from envbuild.recipes.loadrecipe import load_recipe
from envbuild.slurm.check.pitfalls import check_script
from envbuild.slurm.check.rulebase import Finding

HEAD = """#!/bin/bash
#SBATCH --account=project_465000000
#SBATCH --partition=standard-g
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=8
#SBATCH --gpus-per-task=1
#SBATCH --time=01:00:00

"""


def forbidden(text: str) -> list[Finding]:
    report = check_script(text, load_recipe("lumi-g"), {})
    return [finding for finding in report.findings if finding.rule == "forbidden_options"]


def apply(text: str, edit: tuple[int, str]) -> str:
    lines = text.split("\n")
    lines[edit[0] - 1] = edit[1]
    return "\n".join(lines)


def test_the_offered_edit_goes_on_the_srun_line_and_clears_the_finding() -> None:
    text = HEAD + "srun --gpu-bind=map:4,5,2,3,6,7,0,1 python warmup.py\n"
    (finding,) = forbidden(text)
    assert finding.line == 6 and finding.edit is not None
    line, new = finding.edit
    assert line == 9 and new == "srun --gres-flags=allow-task-sharing --gpu-bind=map:4,5,2,3,6,7,0,1 python warmup.py"
    assert "add --gres-flags=allow-task-sharing to the srun line 9 (an srun option" in finding.fix
    fixed = apply(text, finding.edit)
    assert forbidden(fixed) == []
    assert check_script(fixed, load_recipe("lumi-g"), {}).findings == ()  # and adds no other finding


def test_two_steps_without_it_get_no_one_line_edit_and_the_fix_names_both() -> None:
    text = HEAD + "srun python warmup.py\nsrun python train.py\n"
    (finding,) = forbidden(text)
    assert finding.edit is None
    assert "add --gres-flags=allow-task-sharing to the srun lines 9, 10" in finding.fix


def test_one_step_with_it_and_one_without_offers_the_edit_for_the_one_without() -> None:
    text = HEAD + "srun --gres-flags=allow-task-sharing python warmup.py\nsrun python train.py\n"
    (finding,) = forbidden(text)
    assert finding.edit == (10, "srun --gres-flags=allow-task-sharing python train.py")
    assert forbidden(apply(text, finding.edit)) == []


def test_the_flag_in_sbatch_does_not_make_the_job_safe() -> None:
    # sbatch stops on it ("only used with srun"), and the steps would not get it from the job either
    text = HEAD.replace("#SBATCH --time=01:00:00", "#SBATCH --time=01:00:00\n#SBATCH --gres-flags=allow-task-sharing")
    (finding,) = forbidden(text + "srun python train.py\n")
    assert finding.line == 6 and finding.edit == (10, "srun --gres-flags=allow-task-sharing python train.py")


def test_an_srun_with_the_per_task_option_gets_the_flag_on_its_own_line() -> None:
    text = HEAD.replace("#SBATCH --gpus-per-task=1\n", "#SBATCH --gpus-per-node=8\n") + \
        "srun --ntasks-per-gpu=1 python train.py\n"
    (finding,) = forbidden(text)
    assert finding.line == 9
    assert finding.edit == (9, "srun --gres-flags=allow-task-sharing --ntasks-per-gpu=1 python train.py")
    assert forbidden(apply(text, finding.edit)) == []
