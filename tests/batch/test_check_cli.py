"""`envrun sbatch --check SCRIPT` from the command line: the report on stdout, exit 0 clean / 1 with findings,
2 for a script that cannot be read."""

from __future__ import annotations

from pathlib import Path

import pytest

from envbuild.cli import envrun_main

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "batch"


def run(argv: list[str]) -> int:
    with pytest.raises(SystemExit) as done:
        envrun_main.main(argv)
    return done.value.code


def test_check_exit_codes_and_report(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SBATCH_ACCOUNT", raising=False)
    bad = str(FIXTURES / "bad-lumi-g-cpus.sh")
    assert run(["sbatch", "--system", "lumi-g", "--check", bad]) == 1
    out = capsys.readouterr().out
    assert out.startswith(f"{bad}: lumi-g rules (--system)\n{bad}:6: --ntasks-per-node=8 x -c 8 is 64 CPUs per node")
    assert out.endswith(f"{bad}: 1 finding for lumi-g\n")
    good = str(FIXTURES / "lumi-g-multinode-torchrun.sh")
    assert run(["sbatch", "--system", "lumi-g", "--check", good]) == 0
    assert capsys.readouterr().out == f"{good}: clean for lumi-g (8 #SBATCH lines, 1 srun line checked)\n"


def test_check_a_missing_script(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert run(["sbatch", "--system", "puhti", "--check", str(tmp_path / "job.sh")]) == 2
    err = capsys.readouterr().err
    assert f"error: --check {tmp_path / 'job.sh'}: no such file" in err and "fix: " in err
