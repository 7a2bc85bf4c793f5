"""`envrun sweep` on the real local Slurm with the reference image: the examples at 1 and 2 processes on one
node (the table, its files and the plot; a second run resumes and submits nothing), a point that fails (reported
with its job and log, exit status 1, retried by the next run), then 1 and 2 nodes on the two-node test cluster
(last in this module: the two_nodes fixture switches the cluster for it and back afterwards)."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import REPO, run_cli

pytestmark = [pytest.mark.slow, pytest.mark.apptainer, pytest.mark.slurm]
ENVRUN = str(REPO / "bin/envrun")


def sweep(work: Path, image: Path, *args: str) -> tuple[int, str, str]:
    result = run_cli([ENVRUN, "sweep", "--system", "local", "--image", str(image), "--poll", "1", *args], cwd=work,
                     timeout=600)
    return result.returncode, result.stdout, result.stderr


def test_examples_at_one_and_two_processes_then_a_resume_that_submits_nothing(reference_image: Path, tmp_path: Path) -> None:
    shutil.copy(REPO / "examples/ddp_minimal.py", tmp_path)
    code, out, err = sweep(tmp_path, reference_image, "--gpus", "1,2", "--serial", "--", "python", "ddp_minimal.py",
                           "--steps", "50")
    assert code == 0, out + err
    report = tmp_path / "sweep-ddp_minimal"
    rows = list(csv.DictReader((report / "table.csv").open()))
    assert [(r["nodes"], r["workers"], r["unit"], r["status"]) for r in rows] == [
        ("1", "1", "process", "ok"), ("1", "2", "process", "ok")]
    assert all(float(r["throughput"]) > 0 and r["throughput_unit"] == "samples/s" for r in rows)
    assert all(float(r["median_time_s"]) > 1 for r in rows)  # the step's wall time: container and torch start-up too
    assert rows[0]["speedup"] == "1.0" and float(rows[1]["efficiency"]) == pytest.approx(float(rows[1]["speedup"]) / 2,
                                                                                          abs=1e-3)
    assert out.splitlines()[0].split()[:3] == ["nodes", "workers", "runs"] and "2 processes" in out
    assert "job" in err and "RUNNING" in err and "\x1b" not in err  # plain progress lines
    scripts = sorted(p.name for p in (report / "jobs").glob("*.sbatch"))
    assert scripts == ["1n1p-r1.sbatch", "1n2p-r1.sbatch"]
    assert "#SBATCH --cpus-per-task=1" in (report / "jobs/1n1p-r1.sbatch").read_text()
    png = (report / "scaling.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 10_000
    page = (report / "report.html").read_text()
    assert "data:image/png;base64," in page
    assert all(r["gpu_util"] == "" for r in rows)  # no GPU on this machine: not measured
    for key in ("1n1p", "1n2p"):  # each run's job report, beside its output, linked from the sweep's page
        reports = list((report / "jobs").glob(f"{key}-r1-*.report"))
        assert len(reports) == 1 and (reports[0] / "report.json").exists(), list((report / "jobs").iterdir())
        assert f'<a href="jobs/{reports[0].name}/report.html">run 1</a>' in page

    code, out2, err2 = sweep(tmp_path, reference_image, "--gpus", "1,2", "--serial", "--", "python", "ddp_minimal.py",
                             "--steps", "50")
    assert code == 0, out2 + err2
    assert "2 run(s) finished earlier" in err2 and "submitted job" not in err2
    assert out2 == out  # the same table from the saved runs


def test_a_failing_point_is_reported_with_its_job_and_log_and_retried(reference_image: Path, tmp_path: Path) -> None:
    (tmp_path / "fails_at_two.py").write_text(
        "import os, sys\n"
        "if os.environ.get('SLURM_NTASKS') == '2':\n"
        "    sys.exit('two ranks: this script gives up')\n"
        "if os.environ.get('SLURM_PROCID') == '0':\n"
        "    print('envrun-metric: samples_per_s=42.0', flush=True)\n")
    args = ("--gpus", "1,2", "--launcher", "srun", "-o", "rep", "--", "python", "fails_at_two.py")
    code, out, err = sweep(tmp_path, reference_image, *args)
    assert code == 1, out + err
    data = json.loads((tmp_path / "rep/table.json").read_text())
    assert [r["status"] for r in data["rows"]] == ["ok", "failed"]
    failed = data["failed_runs"][0]
    assert failed["state"] == "FAILED" and failed["log"].endswith(f"rep/jobs/1n2p-r1-{failed['job_id']}.out")
    assert "two ranks: this script gives up" in Path(failed["log"]).read_text()
    assert f"failed: 1 node x 2 processes, run 1: job {failed['job_id']} FAILED" in out

    code, out, err = sweep(tmp_path, reference_image, *args)
    assert code == 1, out + err
    assert err.count("submitted job") == 1 and "1 node x 2 processes, run 1/1: submitted job" in err


def test_one_and_two_nodes_on_the_two_node_cluster(two_nodes: None, reference_image: Path, tmp_path: Path) -> None:
    shutil.copy(REPO / "examples/ddp_minimal.py", tmp_path)
    code, out, err = sweep(tmp_path, reference_image, "--nodes", "1,2", "--", "python", "ddp_minimal.py", "--steps", "50")
    assert code == 0, out + err
    data = json.loads((tmp_path / "sweep-ddp_minimal/table.json").read_text())
    assert [(r["nodes"], r["workers"], r["status"]) for r in data["rows"]] == [(1, 2, "ok"), (2, 4, "ok")]
    log = next((tmp_path / "sweep-ddp_minimal/jobs").glob("2n2p-r1-*.out")).read_text()
    assert "world size 4" in log and "PARAMETERS AGREE" in log
