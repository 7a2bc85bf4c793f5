"""`envrun sbatch --check SCRIPT` from the command line: the report on stdout, exit 0 clean / 1 with findings,
2 for a script that cannot be read."""

from __future__ import annotations

import json
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
    monkeypatch.chdir(FIXTURES)  # where the job would start: its program files are there
    bad = str(FIXTURES / "bad-lumi-g-cpus.sh")
    assert run(["sbatch", "--system", "lumi-g", "--check", bad]) == 1
    out = capsys.readouterr().out
    assert out.startswith(f"{bad}: lumi-g rules (--system)\n{bad}:6: --ntasks-per-node=8 x -c 8 is 64 CPUs per node")
    assert out.endswith(f"{bad}: 1 finding for lumi-g\n")
    good = str(FIXTURES / "lumi-g-multinode-torchrun.sh")
    assert run(["sbatch", "--system", "lumi-g", "--check", good]) == 0
    out = capsys.readouterr().out
    assert out.endswith(f"{good}: clean for lumi-g (8 #SBATCH lines, 1 srun line checked)\n")
    # checked here, not on LUMI: the live cluster's facts are not LUMI's, and the report says they were not used
    assert "partitions and limits were not checked" in out or "checked against" not in out


def test_check_json_schema_as_its_help_documents(capsys: pytest.CaptureFixture[str],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """The keys `envrun sbatch --help` names for --check --json (sbatch_cmd.CHECK_JSON), and exit 1 with findings."""
    from envbuild.cli.sbatch_cmd import CHECK_JSON

    monkeypatch.delenv("SBATCH_ACCOUNT", raising=False)
    bad = str(FIXTURES / "bad-lumi-g-cpus.sh")
    assert run(["sbatch", "--system", "lumi-g", "--check", bad, "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert set(data) == {"file", "system", "site_rules", "findings", "notes"}
    assert (data["file"], data["system"], data["site_rules"]) == (bad, "lumi-g", True)
    finding = data["findings"][0]
    assert set(finding) == {"rule", "level", "line", "what", "why", "source", "fix", "edit"}
    assert finding["level"] in ("error", "warning", "info") and finding["line"] == 6
    assert finding["edit"] is None or (isinstance(finding["edit"][0], int) and isinstance(finding["edit"][1], str))
    assert all(f'"{key}"' in CHECK_JSON for key in (*data, *finding))


def test_check_a_missing_script(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert run(["sbatch", "--system", "puhti", "--check", str(tmp_path / "job.sh")]) == 2
    err = capsys.readouterr().err
    assert f"error: --check {tmp_path / 'job.sh'}: no such file" in err and "fix: " in err


def test_check_on_a_site_without_a_recipe(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                                           tmp_path: Path) -> None:
    """NERSC's Perlmutter has no recipe: the first line says site rules were skipped, never "clean for local"."""
    for name in ("ENVBUILD_SYSTEM", "SBATCH_ACCOUNT", "SYSTEMNAME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SLURM_CLUSTER_NAME", "perlmutter")
    job = tmp_path / "job.sh"
    job.write_text("#!/bin/bash\n#SBATCH -C gpu\n#SBATCH -N 1\n#SBATCH --gpus-per-node=4\n\nsrun python train.py\n")
    (tmp_path / "train.py").write_text("")
    monkeypatch.chdir(tmp_path)
    assert run(["sbatch", "--check", str(job)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{job}: note: no recipe for this site (SLURM_CLUSTER_NAME=perlmutter")
    assert "site rules skipped" in out.splitlines()[0] and "local rules" not in out and "for local" not in out
    assert run(["sbatch", "--check", str(job), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["system"], data["site_rules"], data["findings"]) == (None, False, [])
    assert data["notes"][0].startswith("no recipe for this site (SLURM_CLUSTER_NAME=perlmutter")


def test_json_is_for_check(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["sbatch", "--system", "puhti", "--json", "--", "python", "train.py"]) == 2
    err = capsys.readouterr().err
    assert "--json is the output of --check" in err and "fix: envrun sbatch --check SCRIPT --json" in err
