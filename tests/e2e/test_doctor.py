"""`envrun doctor` on the real local Slurm: inside an allocation it runs one step on the job's node(s), reads
each node's record and what torch says in the container there, and with --probe runs a real all-reduce
(gloo here: no GPU on this machine). The two-node run is in test_multinode.py (it shares that module's cluster)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import REPO, run_cli

pytestmark = [pytest.mark.slow, pytest.mark.apptainer, pytest.mark.slurm]
ENVRUN = str(REPO / "bin/envrun")


def findings(output: str) -> list[dict]:
    return json.loads(output)["findings"]


def test_doctor_in_a_one_node_allocation_with_probe(reference_image: Path) -> None:
    result = run_cli(["salloc", "-N1", "-c2", ENVRUN, "doctor", "--image", str(reference_image), "--probe", "--json",
                      "srun", "torchrun", "examples/ddp_minimal.py"], timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    found = findings(result.stdout)
    assert [f["level"] for f in found if f["level"] in ("warn", "fail")] == []
    by = {(f["area"], f["level"]): f["what"] for f in found}
    assert "fits local and `srun torchrun examples/ddp_minimal.py`" in by[("allocation", "ok")]
    assert "in the container: torch 2.13.0+cpu, cuda available: False" in by[("torch", "ok")] or any(
        "in the container: torch 2.13.0+cpu" in f["what"] for f in found)
    probe = [f["what"] for f in found if f["area"] == "probe"]
    assert any("gloo backend" in text for text in probe) and any("2 ranks answered" in text for text in probe)


def test_doctor_fails_when_the_image_is_not_there(tmp_path: Path) -> None:
    """The doctor found a failure: exit 1 (the exit contract, envbuild/shared/errors.py), not 2 (a usage error)."""
    result = run_cli([ENVRUN, "doctor", "--image", str(tmp_path / "missing.sif")], timeout=120, cwd=tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
