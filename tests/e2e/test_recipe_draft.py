"""A recipe drafted from the one-node test cluster (`envrun recipe draft`) runs DDP at once: `envrun --system FILE`
launches 2 ranks under srun in the reference image, and the launch says which recipe file it used. The two-node
case is in tests/e2e/test_multinode.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import REPO, reports, run_cli

pytestmark = [pytest.mark.slow, pytest.mark.apptainer, pytest.mark.slurm]
ENVRUN = str(REPO / "bin/envrun")


def test_a_drafted_recipe_launches_ddp(reference_image: Path, tmp_path: Path) -> None:
    recipe = tmp_path / "drafted.yaml"
    drafted = run_cli([ENVRUN, "recipe", "draft", "-o", str(recipe)], timeout=120)
    assert drafted.returncode == 0, drafted.stderr
    result = run_cli([ENVRUN, "--system", str(recipe), "--image", str(reference_image), "--explain", "srun", "-n", "2",
                      "python", "examples/ddp_minimal.py", "--steps", "2", "--json"], timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    found = reports(result.stdout)
    assert [r["rank"] for r in found] == [0, 1]
    assert all(r["world_size"] == 2 and r["params_agree"] for r in found)
    assert f"system drafted: --system {recipe}" in result.stderr
    assert f"{tmp_path.name}/drafted.yaml:" in result.stderr  # the sizing cites the drafted file's lines
