"""`envrun kernel` and `envrun shell` with the real apptainer, Slurm and a real Jupyter client (issue 33), on the
reference image, which has no ipykernel: the install adds the ipykernel overlay (built once into the shared test
store and reused by every later install and test run)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO, run_cli
from tests.support.jupyter_kernels import image_without_python, run_cell

pytestmark = [pytest.mark.slow, pytest.mark.apptainer]
ENVRUN = str(REPO / "bin/envrun")
NAME = "envrun-local-cpu-pytorch"


class Installed:
    """The module's kernel: its Jupyter data directory, state directory and what the install said."""

    def __init__(self, root: Path, image: Path, build_cache: Path) -> None:
        self.root, self.image = root, image
        self.env = {"JUPYTER_DATA_DIR": str(root / "jupyter"), "XDG_STATE_HOME": str(root / "state"),
                    "ENVBUILD_CACHE_DIR": str(build_cache), "JUPYTER_PATH": ""}
        self.kernels = root / "jupyter" / "kernels"
        self.said = ""  # what the install printed

    def envrun(self, *args: str, cwd: Path | None = None, timeout: int = 900) -> subprocess.CompletedProcess[str]:
        return run_cli([ENVRUN, *args], env_extra=self.env, cwd=cwd or self.root, timeout=timeout)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory, reference_image: Path, build_cache: Path) -> Installed:
    kernel = Installed(tmp_path_factory.mktemp("kernel"), reference_image, build_cache)
    result = kernel.envrun("kernel", "install", "--image", str(reference_image))
    assert result.returncode == 0, result.stdout + result.stderr
    kernel.said = result.stdout
    return kernel


def _spec(installed: Installed, name: str = NAME) -> dict:
    return json.loads((installed.kernels / name / "kernel.json").read_text())


def test_install_adds_the_ipykernel_overlay_and_says_so(installed: Installed) -> None:
    said = installed.said
    assert "has no ipykernel: adding a venv overlay with it" in said
    spec = _spec(installed)
    entry = spec["metadata"]["envrun"]
    assert spec["argv"][:3] == [ENVRUN, "kernel", "run"] and spec["argv"][-1] == "{connection_file}"
    assert entry["image"] == str(installed.image) and entry["overlays"] == []
    assert Path(entry["ipykernel_overlay"]).is_file() and "/kernels/" in entry["ipykernel_overlay"]
    assert entry["log"] == str(installed.root / "state/envrun/kernels" / f"{NAME}.log") and f"log: {entry['log']}" in said


def test_the_kernel_runs_in_the_container_with_envrun_environment(installed: Installed) -> None:
    seen = run_cell(str(installed.kernels), NAME)
    assert seen["_status"] == "ok", seen["_output"]
    assert seen["container"], "the kernel runs inside the image"
    assert seen["torch"].startswith("/opt/envbuild/venv/"), "torch from the image"
    assert seen["ipykernel"].startswith("/opt/envrun-ipykernel/"), "ipykernel from the overlay"
    assert seen["tokenizers"] == "false" and seen["omp"] == str(len(os.sched_getaffinity(0))), seen
    log = Path(_spec(installed)["metadata"]["envrun"]["log"]).read_text()
    assert f"envrun kernel {NAME} starting" in log, "the kernel's stderr goes to its log"


@pytest.mark.slurm
def test_a_kernel_started_in_an_allocation_uses_its_cpus(installed: Installed) -> None:
    env = {**os.environ, **installed.env, "PYTHONPATH": str(REPO)}
    result = subprocess.run(["srun", "-N1", "-n1", "-c1", "--time=5", str(REPO / ".venv/bin/python"), "-m",
                             "tests.support.jupyter_kernels", str(installed.kernels), NAME],
                            capture_output=True, text=True, env=env, cwd=REPO, timeout=600)
    line = next((x for x in result.stdout.splitlines() if x.startswith("RESULT ")), None)
    assert line, result.stdout + result.stderr
    seen = json.loads(line[len("RESULT "):])
    assert seen["_status"] == "ok" and seen["container"], seen["_output"]
    assert seen["slurm_job"], "the kernel sees the job"
    assert len(seen["cpus"]) == 1 and seen["omp"] == "1", f"the job's one CPU, not the node's: {seen}"


def test_the_next_kernel_of_the_image_reuses_the_overlay_and_remove_leaves_nothing(installed: Installed) -> None:
    prefix = installed.root / "group"
    result = installed.envrun("kernel", "install", "--image", str(installed.image), "--prefix", str(prefix),
                              "--name", "second", "--display-name", "Second one")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "is up to date" in result.stdout and "building overlay" not in result.stdout
    assert f"JUPYTER_PATH={prefix}/share/jupyter" in result.stdout
    second = prefix / "share/jupyter/kernels/second"
    entry = json.loads((second / "kernel.json").read_text())["metadata"]["envrun"]
    assert entry["ipykernel_overlay"] == _spec(installed)["metadata"]["envrun"]["ipykernel_overlay"]
    listed = installed.envrun("kernel", "list", "--prefix", str(prefix)).stdout
    assert f"{NAME}  ok" in listed and "second  ok" in listed and "display name: Second one" in listed
    Path(entry["log"]).parent.mkdir(parents=True, exist_ok=True)
    Path(entry["log"]).write_text("a start\n")
    removed = installed.envrun("kernel", "remove", "second", "--prefix", str(prefix))
    assert removed.returncode == 0, removed.stderr
    assert not second.exists() and not Path(entry["log"]).exists()
    assert f"kept the ipykernel overlay {entry['ipykernel_overlay']}: used by {NAME}" in removed.stdout
    assert list((prefix / "share/jupyter/kernels").iterdir()) == []
    again = installed.envrun("kernel", "remove", "second", "--prefix", str(prefix))
    assert again.returncode == 2 and "no kernel named second" in again.stderr and "envrun kernel list" in again.stderr


def test_shell_has_the_same_environment_and_marks_its_prompt(installed: Installed) -> None:
    result = installed.envrun("shell", "--image", str(installed.image), "-c",
                              'echo "$OMP_NUM_THREADS $TOKENIZERS_PARALLELISM $(command -v python)"; ls -d /.singularity.d')
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [str(len(os.sched_getaffinity(0))), "false", "/opt/envbuild/venv/bin/python",
                                     "/.singularity.d"]
    interactive = subprocess.run([ENVRUN, "shell", "--image", str(installed.image)], env={**os.environ, **installed.env},
                                 input='echo "PS1=$PS1"\nexit 3\n', capture_output=True, text=True, timeout=120,
                                 cwd=installed.root)
    assert interactive.returncode == 3
    assert "PS1=[envrun local-cpu-pytorch] " in interactive.stdout


def test_bad_input_is_refused_with_a_fix(installed: Installed, tmp_path: Path) -> None:
    cases = {
        "unknown image": (["--image", str(tmp_path / "nope.sif")], "does not exist"),
        "existing name": (["--image", str(installed.image)], f"a kernel named {NAME} exists"),
        "unwritable prefix": (["--image", str(installed.image), "--prefix", str(REPO / "pyproject.toml")],
                              "cannot write kernelspecs to"),
        "no ipykernel": (["--image", str(installed.image), "--name", "x", "--no-ipykernel-overlay"], "has no ipykernel"),
        "bad name": (["--image", str(installed.image), "--name", "My Env"], "kernel names are lowercase"),
        "no python": (["--image", str(image_without_python(tmp_path)), "--name", "y"], "no Python in"),
    }
    for case, (args, message) in cases.items():
        result = installed.envrun("kernel", "install", *args, cwd=tmp_path)
        assert result.returncode == 2, f"{case}: {result.stdout}{result.stderr}"
        assert message in result.stderr and "\n  fix: " in result.stderr, f"{case}: {result.stderr}"
    assert sorted(p.name for p in installed.kernels.iterdir()) == [NAME], "nothing written by a refused install"
