"""Two rules the issue asked for (issue 38): a container started without --nv in a GPU job on an NVIDIA site, and
`--signal=B:...` with no trap in the batch shell. Each applies only where its reason holds."""

from __future__ import annotations

from envbuild.recipes.loadrecipe import load_recipe
from envbuild.slurm.check.pitfalls import check_script

PUHTI = "#!/bin/bash\n#SBATCH --account=project_2001234\n#SBATCH --partition=gpu\n#SBATCH --time=01:00:00\n"


def rule(text: str, system: str, name: str) -> list[tuple[int, str]]:
    report = check_script(text, load_recipe(system), {}, syntax_error=None)
    return [(f.line, f.what) for f in report.findings if f.rule == name]


def test_a_gpu_job_on_nvidia_gpus_needs_nv() -> None:
    job = PUHTI + "#SBATCH --gres=gpu:v100:1\n#SBATCH --cpus-per-task=10\nsrun singularity exec img.sif python train.py\n"
    assert rule(job, "puhti", "container_without_gpu_flag") == [
        (7, "singularity exec without --nv in a GPU job: the container sees no NVIDIA driver")]
    assert rule(job.replace("exec img", "exec --nv img"), "puhti", "container_without_gpu_flag") == []
    cpu_job = PUHTI.replace("gpu", "small") + "srun singularity exec img.sif python train.py\n"
    assert rule(cpu_job, "puhti", "container_without_gpu_flag") == []


def test_amd_gpus_need_no_flag() -> None:
    job = ("#!/bin/bash\n#SBATCH --account=project_465001234\n#SBATCH --partition=small-g\n#SBATCH --gpus-per-node=1\n"
           "#SBATCH --time=01:00:00\nsrun singularity exec img.sif python train.py\n")
    assert rule(job, "lumi-g", "container_without_gpu_flag") == []


def test_signal_to_the_batch_shell_needs_a_trap() -> None:
    job = "#!/bin/bash\n#SBATCH --time=01:00:00\n#SBATCH --signal=B:USR1@90\nsrun python train.py\n"
    assert rule(job, "local", "signal_without_trap") == [
        (3, "--signal=B:USR1@90: the batch shell gets SIGUSR1, and the script sets no trap for it")]
    trapped = job.replace("srun", "trap 'kill -USR1 $PID' USR1\nsrun")
    assert rule(trapped, "local", "signal_without_trap") == []
    to_the_step = job.replace("B:USR1", "USR1")
    assert rule(to_the_step, "local", "signal_without_trap") == []


def test_lines_bash_accepts_but_the_check_cannot_read_are_named() -> None:
    from envbuild.slurm.check.jobrules import unread_lines
    from envbuild.slurm.check.parse import BatchScript
    from envbuild.slurm.check.rulebase import Context

    script = BatchScript(lines=["#!/bin/bash", "srun python train.py", "weird"], open_quote_line=3)
    (finding,) = unread_lines(Context(script, None, {}, [], None))
    assert finding.line == 3 and "could not read the script from line 3 on (bash accepts it)" in finding.what
    assert unread_lines(Context(script, None, {}, [], (3, "syntax error"))) == []  # bash's own error says it
