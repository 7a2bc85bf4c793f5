"""Images whose runscript sets up their environment (LUMI AI Factory): which runscripts envrun honours, and
the plan it makes for them (pure; the run through apptainer is tests/integration/test_laif_runscript.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from envbuild.launch.runscript import classify_runscript, image_runscript
from tests.launch.test_plan import LAIF_RUNSCRIPT, plan
from tests.support.launch_allocations import LUMI_2_NODES, LUMI_FULL_NODE

# The runscript apptainer/singularity writes for an OCI image with an ENTRYPOINT (its shape: the entrypoint
# and CMD as quoted words, then the arguments evaluated unless SINGULARITY_NO_EVAL is set)
OCI_RUNSCRIPT = """#!/bin/sh
OCI_ENTRYPOINT='"/opt/oci-entrypoint.sh"'
OCI_CMD=''
if [ -n "$SINGULARITY_NO_EVAL" ]; then
    set -- '/opt/oci-entrypoint.sh' "$@"
    exec "$@"
fi
"""
# laifs-container-recipes, containerfiles/multi/Rocm_Multipurpose: what /opt/oci-entrypoint.sh holds
LAIF_ENTRYPOINT = """#!/bin/bash
if [ "${SLURM_NNODES}" = 1 ] && [ -z "${SLURM_GPUS_ON_NODE}" ]; then
    export FI_HMEM_DISABLE_P2P=1
fi
if [ "${ROCR_USE_SLURM_LOCALID}" = 1 ] && [ -n "${SLURM_LOCALID}" ]; then
    export ROCR_VISIBLE_DEVICES="$SLURM_LOCALID"
fi
if [ "${MAP_HIP_TO_ROCR_VISIBLE_DEVICES}" = 1 ] && [ -n "${ROCR_VISIBLE_DEVICES}" ]; then
    export HIP_VISIBLE_DEVICES=0
fi
exec "$@"
"""
VENV_RUNSCRIPT = '#!/bin/sh\n. /opt/venv/bin/activate\nexport MARKER=1\nexec "$@"\n'
APPTAINER_PLACEHOLDER = '#!/bin/sh\n\necho "There is no runscript defined for this container\\n";\n'


def files(**content: str):
    return lambda path: content.get(path)


def test_the_laif_oci_entrypoint_is_honoured_and_described() -> None:
    verdict = classify_runscript(OCI_RUNSCRIPT, files(**{"/opt/oci-entrypoint.sh": LAIF_ENTRYPOINT}))
    assert verdict == ("run", LAIF_RUNSCRIPT)


def test_a_native_runscript_that_activates_a_venv_is_honoured() -> None:
    assert classify_runscript(VENV_RUNSCRIPT, files()) == (
        "run", "its runscript activates /opt/venv and sets MARKER, then runs the command it is given")


@pytest.mark.parametrize("text", [None, "", APPTAINER_PLACEHOLDER, OCI_RUNSCRIPT.replace('"/opt/oci-entrypoint.sh"', "")])
def test_no_runscript_or_nothing_it_would_add_means_exec_without_a_word(text: str | None) -> None:
    assert classify_runscript(text, files()) is None


@pytest.mark.parametrize(("text", "entrypoint", "why"), [
    ('#!/bin/sh\nexec python "$@"\n', None, "does not run the command it is given"),
    ('#!/bin/sh\nexec "$@"\n', None, "does not run the command it is given"),  # adds nothing; exec is the same
    (OCI_RUNSCRIPT.replace("/opt/oci-entrypoint.sh", "/usr/bin/python3"), "\x7fELF", "does not run the command"),
    (OCI_RUNSCRIPT, None, "does not run the command"),  # the entrypoint is not in the image
])
def test_runscripts_that_do_not_run_their_arguments_are_left_alone(text: str, entrypoint: str | None, why: str) -> None:
    mode, reason = classify_runscript(text, files(**({"/usr/bin/python3": entrypoint} if entrypoint else {})))
    assert mode == "exec" and why in reason


def test_image_runscript_reads_a_sandbox_directory(tmp_path: Path) -> None:
    image = tmp_path / "img"
    (image / ".singularity.d").mkdir(parents=True)
    (image / "opt").mkdir()
    (image / ".singularity.d/runscript").write_text(OCI_RUNSCRIPT)
    (image / "opt/oci-entrypoint.sh").write_text(LAIF_ENTRYPOINT)
    assert image_runscript(str(image)) == ("run", LAIF_RUNSCRIPT)
    (image / ".singularity.d/runscript").write_text(APPTAINER_PLACEHOLDER)
    assert image_runscript(str(image)) is None


def test_image_runscript_reads_a_sif_once_and_then_from_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.support.inventory_layout import fixture_image

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # envrun's own cache: cache/envrun
    sif = fixture_image("gzip")  # a committed SIF with a runscript that runs a fixed program
    verdict = image_runscript(str(sif))
    assert verdict is not None and verdict[0] == "exec"
    cached = list((tmp_path / "cache/envrun").glob("runscripts-1-*"))
    assert len(cached) == 1
    assert image_runscript(str(sif)) == verdict  # from the cache
    # a broken file is left to the runtime: envrun says nothing and starts it with exec
    broken = tmp_path / "broken.sif"
    broken.write_bytes(b"not a sif")
    assert image_runscript(str(broken)) is None
    assert image_runscript(str(tmp_path / "missing.sif")) is None


def test_a_plan_for_a_laif_image_runs_it_with_no_eval_and_keeps_gpu_choice_with_envrun() -> None:
    p = plan("srun", "torchrun", "train.py", system="lumi-g", environ={**LUMI_2_NODES, "ROCR_USE_SLURM_LOCALID": "1"},
             runscript=LAIF_RUNSCRIPT)
    start = p.argv.index("/usr/bin/apptainer")
    assert p.argv[start:start + 4] == ("/usr/bin/apptainer", "--quiet", "run", "--no-eval")
    assert "ROCR_USE_SLURM_LOCALID" in p.unset
    reasons = "\n".join(p.reasons)
    assert "apptainer run --no-eval, not exec: its OCI entrypoint /opt/oci-entrypoint.sh" in reasons
    assert "ROCR_USE_SLURM_LOCALID unset" in reasons


def test_the_switch_is_also_removed_when_passed_through_the_runtime_prefix() -> None:
    p = plan("python", "x.py", system="lumi-g", environ={"APPTAINERENV_ROCR_USE_SLURM_LOCALID": "1"}, runscript="x")
    assert p.unset == ("APPTAINERENV_ROCR_USE_SLURM_LOCALID",)


def test_other_images_keep_exec_and_their_environment() -> None:
    p = plan("srun", "python", "train.py", system="lumi-g", environ={**LUMI_FULL_NODE, "ROCR_USE_SLURM_LOCALID": "1"})
    assert "exec" in p.argv and "run" not in p.argv and p.unset == ()


def test_lumi_g_plan_forces_no_gdr_level_and_sets_the_mr_cache_monitor() -> None:
    env = dict(plan("srun", "torchrun", "train.py", system="lumi-g", environ=LUMI_2_NODES).env)
    assert "NCCL_NET_GDR_LEVEL" not in env  # hangs torch.distributed with the ROCm 7 LAIF images
    assert env["FI_MR_CACHE_MONITOR"] == "userfaultfd"
