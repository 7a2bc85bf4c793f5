"""Correct scripts pass `envrun sbatch --check` clean: scripts written here after the sites' public docs
(tests/fixtures/batch/, each naming the page it follows), and every script `envrun sbatch` itself writes."""

from __future__ import annotations

from pathlib import Path

import pytest

from envbuild.host.runtime import Runtime
from envbuild.recipes.loadrecipe import load_recipe
from envbuild.slurm.batch.jobplan import BatchRequest, Requeue, plan_batch
from envbuild.slurm.batch.resources import JobRequest
from envbuild.slurm.batch.script import render_script
from envbuild.slurm.batch.staging import StageSource
from envbuild.slurm.check.pitfalls import check_script, render_report
from tests.support.launch_allocations import HOST

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "batch"

# (script, system, srun lines it has)
COURSE_SCRIPTS = [
    ("lumi-g-full-node-8-tasks.sh", "lumi-g", 1),  # lumig-job / distribution-binding: masks, --gpus-per-node=8
    ("lumi-g-small-g-1-gpu-torchrun.sh", "lumi-g", 1),
    ("lumi-g-multinode-torchrun.sh", "lumi-g", 1),  # LUMI AI guide: 1 task/node, 56 CPUs, --mem=480G
    ("lumi-g-gpus-per-task-sharing.sh", "lumi-g", 1),
    ("lumi-g-torchrun-step-override.sh", "lumi-g", 1),
    ("puhti-1-gpu.sh", "puhti", 1),  # docs.csc.fi ml-multi and ml-data (nvme staging)
    ("puhti-4-gpus-torchrun.sh", "puhti", 1),
    ("mahti-gpusmall-2-gpus.sh", "mahti", 1),
    ("mahti-gpumedium-2-nodes.sh", "mahti", 2),
    ("juwels-booster-2-nodes.sh", "juwels-booster", 1),  # JSC course run_ddp.sh shape, SRUN_CPUS_PER_TASK
    ("local-2-tasks.sh", "local", 2),
]


@pytest.mark.parametrize(("name", "system", "sruns"), COURSE_SCRIPTS, ids=[c[0] for c in COURSE_SCRIPTS])
def test_course_style_scripts_pass_clean(name: str, system: str, sruns: int) -> None:
    report = check_script((FIXTURES / name).read_text(), load_recipe(system), {})
    assert report.findings == (), render_report(name, report)
    assert report.srun_lines == sruns
    assert render_report(name, report).startswith(f"{name}: clean for {system} (")


RUNTIME = Runtime("apptainer", "apptainer")
STAGED = (StageSource(path="/scratch/project_2001234/data.tar", kind="tar", name="data", size_gb=50.0),)

# (id, system, job request, command, stages, requeue)
GENERATED = [
    ("lumi-g 1 node torchrun", "lumi-g", JobRequest(account="project_465000000"), ("python", "train.py"), (), None),
    ("lumi-g srun 8 tasks", "lumi-g", JobRequest(account="project_465000000", launcher="srun"),
     ("python", "train.py"), (), None),
    ("lumi-g 4 nodes torchrun requeue", "lumi-g", JobRequest(nodes=4, account="project_465000000", time="2-00:00:00"),
     ("python", "train.py"), (), Requeue()),
    ("lumi-g small-g 2 GCDs srun", "lumi-g", JobRequest(gpus_per_node=2, account="project_465000000",
                                                         launcher="srun"), ("python", "train.py"), (), None),
    ("puhti 1 GPU", "puhti", JobRequest(gpus_per_node=1, account="project_2001234"), ("python", "train.py"), (), None),
    ("puhti 4 GPUs staged", "puhti", JobRequest(account="project_2001234"), ("python", "train.py", "{staged}"),
     STAGED, None),
    ("mahti 2 GPUs", "mahti", JobRequest(gpus_per_node=2, account="project_2001234"), ("python", "train.py"), (), None),
    ("mahti 2 nodes staged", "mahti", JobRequest(nodes=2, account="project_2001234"), ("python", "train.py"),
     STAGED, None),
    ("juwels-booster 2 nodes srun", "juwels-booster", JobRequest(nodes=2, account="training2426", launcher="srun"),
     ("python", "train.py"), (), None),
    ("juwels-booster 2 nodes torchrun", "juwels-booster", JobRequest(nodes=2, account="training2426"),
     ("python", "train.py"), (), None),
    ("roihu 1 node torchrun", "roihu", JobRequest(account="project_2001234"), ("python", "train.py"), (), None),
    ("roihu 2 nodes srun staged", "roihu", JobRequest(nodes=2, account="project_2001234", launcher="srun"),
     ("python", "train.py"), (StageSource(path="/scratch/project_2001234/data.tar", kind="tar", name="data", size_gb=50.0),),
     None),
    ("jupiter 1 node torchrun", "jupiter", JobRequest(account="training2600"), ("python", "train.py"), (), None),
    ("jupiter 2 nodes torchrun", "jupiter", JobRequest(nodes=2, account="training2600"), ("python", "train.py"), (), None),
    ("local srun", "local", JobRequest(launcher="srun"), ("python", "train.py"), STAGED, None),
    ("jureca-dc 2 nodes torchrun", "jureca-dc", JobRequest(nodes=2, account="training2546"), ("python", "train.py"),
     (), None),
    ("jureca-dc 1 node srun", "jureca-dc", JobRequest(account="training2546", launcher="srun"),
     ("python", "train.py"), (), None),
    ("mahti gpusmall 1 GPU srun", "mahti", JobRequest(gpus_per_node=1, account="project_2001234", launcher="srun"),
     ("python", "train.py"), (), None),
    ("lumi-g 2 nodes accelerate", "lumi-g", JobRequest(nodes=2, account="project_465000000", launcher="accelerate"),
     ("accelerate", "launch", "train.py"), (), None),
]


@pytest.mark.parametrize(("system", "job", "command", "stages", "requeue"), [g[1:] for g in GENERATED],
                         ids=[g[0] for g in GENERATED])
def test_scripts_envrun_sbatch_writes_pass_clean(system: str, job: JobRequest, command: tuple[str, ...],
                                                 stages: tuple[StageSource, ...], requeue: Requeue | None) -> None:
    recipe = load_recipe(system)
    request = BatchRequest(command=command, job=job, image="/scratch/project/env.sif", stages=stages, requeue=requeue)
    text = render_script(plan_batch(recipe, request, RUNTIME, HOST if recipe.node is None else None))
    report = check_script(text, recipe, {})
    assert report.findings == (), render_report("generated.sbatch", report) + "\n" + text
    assert report.srun_lines >= 1
