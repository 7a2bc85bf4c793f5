"""`envrun sweep` from the command line over a stand-in Slurm (no cluster needed): the scripts it writes through
envrun sbatch's planner, the table and files, resuming, and refusals before any job is submitted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from envbuild.cli import envrun_main
from envbuild.commands import sweep as sweep_app
from envbuild.slurm.sweep import runner

METRIC = {"1n1p": 100.0, "1n2p": 180.0}


class StandIn:
    """sbatch: read the script's --output and write what the job would print; scontrol: COMPLETED at once."""

    def __init__(self) -> None:
        self.scripts: list[str] = []

    def submit(self, script: str, cwd: str) -> str:
        self.scripts.append(script)
        job_id = str(500 + len(self.scripts))
        text = Path(script).read_text()
        pattern = next(line.split("=", 1)[1] for line in text.splitlines() if line.startswith("#SBATCH --output="))
        key = Path(script).name.split("-")[0]
        Path(pattern.replace("%j", job_id)).write_text(
            f"envrun-metric: samples_per_s={METRIC[key]}\nenvrun-step: wall_ms=10000 exit=0\n")
        return job_id

    def fields(self, job_id: str) -> dict[str, str]:
        return {"JobState": "COMPLETED", "ExitCode": "0:0"}


@pytest.fixture
def slurm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> StandIn:
    (tmp_path / "env.sif").write_bytes(b"")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "envrun-config.yaml").write_text("batch: {}\n")
    monkeypatch.setenv("ENVRUN_CONFIG", str(tmp_path / "envrun-config.yaml"))
    for name in ("SBATCH_ACCOUNT", "SLURM_ACCOUNT", "ENVRUN_IMAGE", "SLURM_JOB_ID"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr("os.sched_getaffinity", lambda _pid: {0, 1}, raising=False)  # a 2-CPU host, as CI
    fake = StandIn()
    # the sweep submits each script's text on sbatch's stdin (envbuild.commands.sweep.slurm_calls); the stand-in
    # reads the copy the sweep keeps in its jobs/
    monkeypatch.setattr(sweep_app, "slurm_calls", lambda texts: runner.Slurm(fake.submit, fake.fields))
    return fake


def sweep(*argv: str) -> int:
    with pytest.raises(SystemExit) as done:
        envrun_main.main(["sweep", "--system", "local", "--poll", "0.01", *argv])
    return done.value.code


def test_a_sweep_writes_sbatch_scripts_the_table_and_its_files(slurm: StandIn, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert sweep("--gpus", "1,2", "--", "python", "train.py", "--lr", "3e-4") == 0
    out, err = capsys.readouterr()
    assert [Path(s).name for s in slurm.scripts] == ["1n1p-r1.sbatch", "1n2p-r1.sbatch"]
    one = (tmp_path / "sweep-train/jobs/1n1p-r1.sbatch").read_text()
    assert "#SBATCH --job-name=train-1n1p" in one and "#SBATCH --cpus-per-task=1" in one
    assert "srun torchrun train.py --lr 3e-4" in one and "envrun-step: wall_ms=" in one
    assert "#SBATCH --cpus-per-task=2" in (tmp_path / "sweep-train/jobs/1n2p-r1.sbatch").read_text()
    assert "1.80x" in out and "90%" in out
    data = json.loads((tmp_path / "sweep-train/table.json").read_text())
    assert [r["speedup"] for r in data["rows"]] == [1.0, 1.8]
    assert {p.name for p in (tmp_path / "sweep-train").iterdir()} >= {"sweep.json", "table.csv", "scaling.png",
                                                                        "report.html"}
    assert "envrun sweep: wrote" in err

    assert sweep("--gpus", "1,2", "--", "python", "train.py", "--lr", "3e-4") == 0  # resumed: nothing to run
    assert len(slurm.scripts) == 2 and "2 run(s) finished earlier" in capsys.readouterr().err


def test_refusals_come_before_any_job(slurm: StandIn, capsys: pytest.CaptureFixture[str]) -> None:
    assert sweep("--gpus", "3", "--", "python", "train.py") == 2
    assert "a node holds 2 processes, so 3 does not fill whole nodes" in capsys.readouterr().err
    assert sweep("--gpus", "1") == 2
    assert "no training command given" in capsys.readouterr().err
    assert sweep("--nodes", "1", "--repeat", "0", "--", "python", "train.py") == 2
    assert sweep("--nodes", "1", "-o", "r", "--", "python", "train.py") == 0
    assert sweep("--nodes", "1", "--output", "r", "--", "python", "other.py") == 1
    assert "holds another sweep: its command was" in capsys.readouterr().err
    assert len(slurm.scripts) == 1
