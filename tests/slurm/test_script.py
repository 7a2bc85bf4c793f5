"""Batch scripts per system and shape (pure; no Slurm needed): tests/golden/sbatch-*.sh.

Regenerate after an intended change with ENVBUILD_UPDATE_GOLDEN=1 pytest tests/slurm/test_script.py and review
the diff. Site paths (/scratch/..., /projappl/...) are what the sites' docs use; nothing here reads them."""

from __future__ import annotations

import subprocess

import pytest

from envbuild.host.runtime import Runtime
from envbuild.recipes.loadrecipe import load_recipe
from envbuild.slurm.batch.jobplan import BatchRequest, Requeue, plan_batch
from envbuild.slurm.batch.resources import JobRequest
from envbuild.slurm.batch.script import render_script, shell_word
from envbuild.slurm.batch.staging import StageSource
from tests.support.golden import check_golden
from tests.support.launch_allocations import HOST

RUNTIME = Runtime("/usr/bin/apptainer", "apptainer")
LUMI_IMAGE = "/appl/local/laifs/containers/lumi-multitorch-latest.sif"
CSC_IMAGE = "/projappl/project_2001234/env.sif"
ROIHU_IMAGE = "/projappl/project_2001234/env-aarch64.sif"
JUPITER_IMAGE = "/p/project1/training2600/env-aarch64.sif"
TRAIN = ("python", "train.py", "--epochs", "10")
PUHTI_TAR = StageSource("/scratch/project_2001234/imagenet-mini.tar", "tar", "imagenet-mini", 40.0, top="imagenet-mini")
PUHTI_DIR = StageSource("/scratch/project_2001234/tokenized", "dir", "tokenized", 2.5)


def case(system: str, job: JobRequest, command: tuple[str, ...] = TRAIN, image: str = CSC_IMAGE, **extra):
    return system, job, command, image, extra


GOLDEN_CASES = {
    "lumi-full-node-torchrun": case("lumi-g", JobRequest(account="project_465000000", time="02:00:00"), image=LUMI_IMAGE),
    "lumi-8-tasks-masks": case("lumi-g", JobRequest(account="project_465000000", launcher="srun"), image=LUMI_IMAGE),
    "lumi-4-nodes-requeue": case("lumi-g", JobRequest(account="project_465000000", nodes=4, time="2-00:00:00"),
                                 image=LUMI_IMAGE, requeue=Requeue()),
    "lumi-small-g-2-gcds": case("lumi-g", JobRequest(account="project_465000000", gpus_per_node=2), image=LUMI_IMAGE),
    "puhti-1-gpu-stage": case("puhti", JobRequest(account="project_2001234", gpus_per_node=1, stage_gb=40.0),
                              ("python", "train.py", "--data", "{staged}/train"), stages=(PUHTI_TAR,)),
    "puhti-4-gpus-stage": case("puhti", JobRequest(account="project_2001234", stage_gb=42.5),
                               ("python", "train.py", "--data", "{staged}", "--tokens", "{staged:2}"),
                               stages=(PUHTI_TAR, PUHTI_DIR)),
    "mahti-2-gpus": case("mahti", JobRequest(account="project_2001234", gpus_per_node=2)),
    "mahti-2-nodes": case("mahti", JobRequest(account="project_2001234", nodes=2, time="12:00:00")),
    "juwels-2-nodes": case("juwels-booster", JobRequest(account="training2426", nodes=2, launcher="srun"),
                           image="/p/project/training2426/env.sif"),
    "puhti-2-nodes-accelerate": case("puhti", JobRequest(account="project_2001234", nodes=2, launcher="accelerate"),
                                     ("python", "train_accelerate.py", "--mixed-precision", "fp16")),
    "mahti-2-nodes-deepspeed": case("mahti", JobRequest(account="project_2001234", nodes=2, launcher="deepspeed"),
                                    ("python", "train.py", "--deepspeed_config", "ds_config.json")),
    "local-cpu": case("local", JobRequest(), ("python", "examples/ddp_minimal.py", "--steps", "10"),
                      image="/work/proj/local-cpu-pytorch.sif"),
    # 2026 (issue 19): the GH200 (aarch64) systems at 1 and 2 nodes
    "roihu-1-node": case("roihu", JobRequest(account="project_2001234"), image=ROIHU_IMAGE),
    "roihu-2-nodes": case("roihu", JobRequest(account="project_2001234", nodes=2, time="12:00:00"), image=ROIHU_IMAGE),
    "jupiter-1-node": case("jupiter", JobRequest(account="training2600"), image=JUPITER_IMAGE),
    "jupiter-2-nodes": case("jupiter", JobRequest(account="training2600", nodes=2, launcher="srun"), image=JUPITER_IMAGE),
    # envrun sweep's point on a node without GPUs: one training process, the step's wall time printed
    "local-sweep-1-process": case("local", JobRequest(processes_per_node=1), ("python", "examples/ddp_minimal.py"),
                                  image="/work/proj/local-cpu-pytorch.sif", time_step=True),
}


def render(name: str) -> str:
    system, job, command, image, extra = GOLDEN_CASES[name]
    request = BatchRequest(command=command, job=job, image=image, cwd="/work/proj", regenerate=f"(golden case {name})",
                           **extra)
    return render_script(plan_batch(load_recipe(system), request, RUNTIME, HOST))


def golden_names() -> set[str]:
    return {f"sbatch-{name}.sh" for name in GOLDEN_CASES}


@pytest.mark.parametrize("name", sorted(GOLDEN_CASES))
def test_batch_script_matches_golden(name: str) -> None:
    check_golden(f"sbatch-{name}.sh", render(name))


@pytest.mark.parametrize("name", sorted(GOLDEN_CASES))
def test_batch_script_is_valid_bash(name: str) -> None:
    result = subprocess.run(["bash", "-n"], input=render(name), capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr


def test_lumi_full_node_asks_for_the_whole_node_and_one_launcher() -> None:
    text = render("lumi-full-node-torchrun")
    for line in ("#SBATCH --partition=standard-g", "#SBATCH --gpus-per-node=8", "#SBATCH --ntasks-per-node=1",
                 "#SBATCH --cpus-per-task=56", "#SBATCH --mem=480G", "#SBATCH --account=project_465000000"):
        assert line in text
    assert "--gpus-per-task" not in text and "--cpus-per-gpu" not in text


def test_per_gpu_launch_on_lumi_gets_the_masks_at_run_time() -> None:
    text = render("lumi-8-tasks-masks")
    assert "#SBATCH --ntasks-per-node=8" in text and "#SBATCH --cpus-per-task=7" in text
    assert "--cpu-bind=mask_cpu" in text and "ROCR_VISIBLE_DEVICES=$SLURM_LOCALID" in text


def test_puhti_staging_asks_for_nvme_in_the_gpu_gres() -> None:
    text = render("puhti-1-gpu-stage")
    assert "#SBATCH --gres=gpu:v100:1,nvme:49" in text
    assert 'export ENVRUN_STAGE_DIR="$LOCAL_SCRATCH"' in text
    assert 'export ENVRUN_STAGED="$ENVRUN_STAGE_DIR"/imagenet-mini/imagenet-mini' in text
    assert '--bind "$ENVRUN_STAGE_DIR" srun torchrun train.py --data "${ENVRUN_STAGED}"/train' in text


def test_mahti_two_gpus_go_to_gpusmall_and_memory_is_left_to_the_site() -> None:
    text = render("mahti-2-gpus")
    assert "#SBATCH --partition=gpusmall" in text and "#SBATCH --gres=gpu:a100:2" in text
    assert "#SBATCH --cpus-per-task=64" in text and "--mem" not in text


def test_juwels_exports_srun_cpus_per_task() -> None:
    text = render("juwels-2-nodes")
    assert 'export SRUN_CPUS_PER_TASK="${SRUN_CPUS_PER_TASK:-$SLURM_CPUS_PER_TASK}"' in text
    assert "#SBATCH --cpus-per-task=24" in text and "#SBATCH --gres=gpu:4" in text


@pytest.mark.parametrize(("word", "written"), [
    ("train.py", "train.py"),
    ("a b", "'a b'"),
    ("$HOME", "'$HOME'"),  # the training command's words are literal: the user's shell has expanded them
    ("$(rm -rf /)", "'$(rm -rf /)'"),
    ("{staged}", '"${ENVRUN_STAGED}"'),
    ("--data={staged:2}/x y", "--data=\"${ENVRUN_STAGED_2}\"'/x y'"),
    ("{stagedX}", "'{stagedX}'"),
])
def test_shell_words(word: str, written: str) -> None:
    assert shell_word(word) == written


@pytest.mark.parametrize("name", sorted(GOLDEN_CASES))
def test_every_golden_script_passes_its_own_check(name: str) -> None:
    from envbuild.slurm.check.pitfalls import check_script

    report = check_script(render(name), load_recipe(GOLDEN_CASES[name][0]), {})
    assert not report.findings, [f.what for f in report.findings]


@pytest.mark.parametrize("name", ["roihu-1-node", "roihu-2-nodes", "jupiter-1-node", "jupiter-2-nodes"])
def test_gh200_scripts_pass_envrun_sbatch_check(name: str) -> None:
    from envbuild.slurm.check.pitfalls import check_script, render_report

    system = GOLDEN_CASES[name][0]
    report = check_script(render(name), load_recipe(system), {})
    assert report.findings == (), render_report(name, report)
    text = render(name)
    request = "#SBATCH --gres=gpu:gh200:4" if system == "roihu" else "#SBATCH --gres=gpu:4"
    assert request in text and "--mem" not in text  # memory comes with the GPUs or the node
