"""`envrun sbatch` from the command line (no Slurm needed): print, write, config defaults and refusals."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from envbuild.cli import envrun_main


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "env.sif").write_bytes(b"")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ENVRUN_CONFIG", str(tmp_path / "envrun-config.yaml"))
    (tmp_path / "envrun-config.yaml").write_text("batch: {time: '04:00:00'}\n")
    for name in ("SBATCH_ACCOUNT", "SLURM_ACCOUNT", "ENVRUN_IMAGE", "SLURM_JOB_ID"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


def run(argv: list[str]) -> int:
    with pytest.raises(SystemExit) as done:
        envrun_main.main(["sbatch", *argv])
    return done.value.code


def test_print_is_the_default(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["--system", "puhti", "-A", "project_2001234", "--gpus-per-node", "1", "--", "python", "train.py",
                "--lr", "3e-4"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("#!/bin/bash\n")
    assert "#SBATCH --time=04:00:00" in out  # from the config
    assert f"--image {project}/env.sif --report %x-%j.report srun torchrun train.py --lr 3e-4\n" in out  # the one *.sif here, absolute


def test_o_writes_an_executable_script(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["--system", "local", "-o", "jobs/train.sbatch", "--", "python", "train.py"]) == 0
    path = project / "jobs" / "train.sbatch"
    assert path.read_text().startswith("#!/bin/bash\n") and os.stat(path).st_mode & stat.S_IXUSR
    assert "submit it with: sbatch jobs/train.sbatch" in capsys.readouterr().err


def test_account_from_the_config_and_from_sbatch_account(project: Path, capsys: pytest.CaptureFixture[str],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    (project / "envrun-config.yaml").write_text("systems:\n  lumi-g: {batch: {account: project_465000001}}\n")
    assert run(["--system", "lumi-g", "--", "python", "train.py"]) == 0
    out = capsys.readouterr().out
    assert "#SBATCH --account=project_465000001" in out and "(the envrun config (batch.account))" in out
    (project / "envrun-config.yaml").write_text("{}\n")
    monkeypatch.setenv("SBATCH_ACCOUNT", "project_465000002")
    assert run(["--system", "lumi-g", "--", "python", "train.py"]) == 0
    assert "#SBATCH --account=project_465000002" in capsys.readouterr().out


@pytest.mark.parametrize(("argv", "message"), [
    (["--system", "lumi-g", "--", "python", "train.py"], "lumi-g needs an account"),
    (["--system", "local", "--wait", "--", "python", "train.py"], "--wait follows a submitted job"),
    (["--system", "local", "--requeue-max", "2", "--", "python", "train.py"], "--requeue-max without --requeue"),
    (["--system", "local", "--", "srun", "python", "train.py"], "the command starts with srun"),
    (["--system", "local", "--stage", "missing-data", "--", "python", "train.py"], "--stage missing-data: no such file"),
    (["--system", "local", "--image", "nope.sif", "--", "python", "train.py"], "nope.sif does not exist"),
])
def test_refusals(project: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    assert run(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "fix:" in err
