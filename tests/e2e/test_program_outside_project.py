"""A training program outside the project directory, the working directory, $HOME and /tmp (all of which the
container sees): envrun binds its directory read-only, so every rank opens it (issue 29's north star: before,
the job waited in the queue and then every rank failed with "can't open file"). Real apptainer and Slurm with
the reference image; the program lives in a directory of its own under /srv (the tests run as root)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO, reports, run_cli

pytestmark = [pytest.mark.slow, pytest.mark.apptainer, pytest.mark.slurm]
ENVRUN = str(REPO / "bin/envrun")


@pytest.fixture
def outside() -> Iterator[Path]:
    """A directory with ddp_minimal.py outside every bind envrun or apptainer makes by itself."""
    parent = Path("/srv")
    parent.mkdir(exist_ok=True)
    if not os.access(parent, os.W_OK):
        pytest.fail(f"{parent} is not writable: this test needs a directory outside /tmp, $HOME and the checkout "
                    "(run the tests as root, as CI does)", pytrace=False)
    directory = Path(tempfile.mkdtemp(prefix="envrun-outside-", dir=parent))
    try:
        directory.chmod(0o755)
        shutil.copy(REPO / "examples/ddp_minimal.py", directory)
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def test_srun_python_runs_a_program_outside_the_binds_from_another_directory(
        reference_image: Path, outside: Path, tmp_path: Path) -> None:
    """Each task opens the program (no process group: what is tested is that the file is there, in every task)."""
    (outside / "train.py").write_text("import os\nprint(f'TRAIN rank={os.environ[\"RANK\"]} file={__file__}', flush=True)\n")
    result = run_cli([ENVRUN, "--image", str(reference_image), "--explain", "srun", "python", str(outside / "train.py")],
                     cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    ranks = sorted(line for line in result.stdout.splitlines() if line.startswith("TRAIN "))
    assert ranks and ranks[0] == f"TRAIN rank=0 file={outside}/train.py", result.stdout
    assert f"envrun: --bind {outside}:{outside}:ro: the program {outside}/train.py is outside" in result.stderr


def test_two_node_batch_job_runs_torchrun_on_a_program_outside_the_project(
        two_nodes: None, reference_image: Path, outside: Path, tmp_path: Path) -> None:
    """`envrun sbatch --nodes 2 --submit --wait -- torchrun /outside/ddp_minimal.py`: the batch script says why the
    directory is bound, and envrun in the job binds it on both nodes."""
    result = run_cli([ENVRUN, "sbatch", "--system", "local", "--image", str(reference_image), "--nodes", "2",
                      "--submit", "--wait", "--", "torchrun", str(outside / "ddp_minimal.py"), "--steps", "10", "--json"],
                     cwd=tmp_path, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    found = reports(result.stdout)
    assert [r["rank"] for r in found] == [0, 1, 2, 3], result.stdout + result.stderr
    assert all(r["world_size"] == 4 and r["params_agree"] for r in found)
    assert sorted({r["host"] for r in found}) == ["node1", "node2"]
    script = next((tmp_path / ".envrun/jobs").glob("ddp_minimal-*.sbatch")).read_text()
    assert f"#   --bind {outside}:{outside}:ro: the program {outside}/ddp_minimal.py is outside" in script
