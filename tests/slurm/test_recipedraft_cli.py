"""`envrun recipe draft` as a user runs it: on the local test cluster (marker slurm) it drafts a recipe that
`envrun --system FILE` and ENVBUILD_SYSTEM=FILE use at once; without Slurm it stops with exit 2 and the fix.
The DDP launches with a drafted recipe are in tests/e2e/test_recipe_draft.py and tests/e2e/test_multinode.py."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, run_cli

ENVRUN = str(REPO / "bin/envrun")


@pytest.mark.slurm
def test_draft_write_refuse_replace_and_use(tmp_path: Path) -> None:
    done = run_cli([ENVRUN, "recipe", "draft", "-o", "mysite.yaml"], cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    text = (tmp_path / "mysite.yaml").read_text()
    assert text.startswith("# Drafted by `envrun recipe draft` on the Slurm cluster envbuild-local at ")
    assert "name: mysite\n" in text and "slurm_cluster_names: [envbuild-local]" in text
    assert "  debug: {" in text and "scontrol show node " in text
    assert "wrote mysite.yaml (recipe mysite)" in done.stderr and "envrun --system ./mysite.yaml" in done.stderr

    again = run_cli([ENVRUN, "recipe", "draft", "-o", "mysite.yaml"], cwd=tmp_path, timeout=120)
    assert again.returncode == 2 and "mysite.yaml exists" in again.stderr and "--force" in again.stderr
    forced = run_cli([ENVRUN, "recipe", "draft", "-o", "mysite.yaml", "--force", "--partition", "short"], cwd=tmp_path,
                     timeout=120)
    assert forced.returncode == 0, forced.stderr
    assert "# node: the nodes of partition short (chosen with --partition)." in (tmp_path / "mysite.yaml").read_text()

    for how, env in (("--system", {}), ("ENVBUILD_SYSTEM", {"ENVBUILD_SYSTEM": str(tmp_path / "mysite.yaml")})):
        options = ["--system", "./mysite.yaml"] if how == "--system" else []
        dry = run_cli([ENVRUN, *options, "--image", "/etc/hostname", "--dry-run", "srun", "-n", "2", "python", "x.py"],
                      cwd=tmp_path, env_extra=env, timeout=120)
        assert dry.returncode == 0, dry.stderr
        shown = "# system mysite: --system ./mysite.yaml" if how == "--system" else "# system mysite: $ENVBUILD_SYSTEM"
        assert shown in dry.stdout, dry.stdout
        assert "(mysite.yaml:" in dry.stdout or f"{tmp_path.name}/mysite.yaml:" in dry.stdout  # facts cite the file


@pytest.mark.slurm
def test_draft_printed_names_the_cluster() -> None:
    done = run_cli([ENVRUN, "recipe", "draft"], timeout=120)
    assert done.returncode == 0, done.stderr
    assert "name: envbuild-local\n" in done.stdout and "DRAFTED by envrun recipe draft" in done.stdout


def test_without_slurm_exit_2_with_the_fix(tmp_path: Path) -> None:
    env = {key: value for key, value in os.environ.items() if not key.startswith("SLURM")}
    env.update(PATH=str(tmp_path), PYTHONPATH=str(REPO))  # no scontrol on PATH
    import subprocess

    done = subprocess.run([sys.executable, "-m", "envbuild.cli.envrun_main", "recipe", "draft"], capture_output=True,
                          text=True, env=env, cwd=tmp_path, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "reads the cluster through Slurm's scontrol, which is not on PATH here" in done.stderr
    assert "fix: run it on a login node of the cluster" in done.stderr and done.stdout == ""


def test_an_output_without_yaml_is_refused(tmp_path: Path) -> None:
    done = run_cli([ENVRUN, "recipe", "draft", "-o", "mysite.txt"], cwd=tmp_path, timeout=120)
    assert done.returncode == 2 and "a recipe file's name ends in .yaml" in done.stderr
