"""Both command names of the container runtime, for real: ENVBUILD_RUNTIME=apptainer and =singularity each run an
envrun launch under the local Slurm and `envbuild packages --via-runtime` (which starts the image). On the test
machine `singularity` is apptainer's compatibility link (Debian's alternatives); the version line says which
program answers, and the runtime's own name is what envrun puts in the command. A SingularityCE or an old
version is covered with fake runtimes in tests/host/test_runtime_version.py."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from envbuild.host.runtime import require_runtime
from tests.conftest import REPO, run_cli

pytestmark = [pytest.mark.slow, pytest.mark.apptainer, pytest.mark.slurm]


@pytest.mark.parametrize("name", ["apptainer", "singularity"])
def test_each_runtime_name_launches_and_lists_packages(reference_image: Path, tmp_path: Path, name: str) -> None:
    path = shutil.which(name)
    assert path is not None, f"{name} is not on PATH (provision/install.sh installs apptainer and its singularity link)"
    env = {"ENVBUILD_RUNTIME": name, "ENVBUILD_CACHE_DIR": str(tmp_path / "cache")}
    runtime = require_runtime(environ={**os.environ, **env})
    print(f"\n{name}: {path} -> {os.path.realpath(path)}: {runtime.version}")
    assert runtime.path == path and runtime.version.split()[:2] in (["apptainer", "version"],
                                                                    ["singularity-ce", "version"])

    dry = run_cli([str(REPO / "bin/envrun"), "--image", str(reference_image), "--dry-run", "srun", "-n1", "python",
                   "-c", "pass"], env_extra=env, timeout=60)
    assert dry.returncode == 0, dry.stderr
    assert f" {path} --quiet exec " in dry.stdout, "the runtime is run by the name it was found under (INFO lines off)"

    launch = run_cli([str(REPO / "bin/envrun"), "--image", str(reference_image), "srun", "-n1", "python", "-c",
                      "import torch; print('RUNTIME_OK', torch.__version__)"], env_extra=env, timeout=300)
    assert launch.returncode == 0, launch.stdout + launch.stderr
    assert "RUNTIME_OK 2." in launch.stdout

    listed = run_cli([str(REPO / "bin/envbuild"), "packages", "--via-runtime", str(reference_image), "--grep", "^torch$"],
                     env_extra=env, timeout=300)
    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert "torch" in listed.stdout and "/opt/envbuild/venv" in listed.stdout
