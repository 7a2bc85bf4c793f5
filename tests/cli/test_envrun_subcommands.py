"""envrun's subcommands, listed once (envbuild.cli.envrun_main.SUBCOMMANDS): main() dispatches from the table,
`envrun --help` and the CLI reference (docs/gen_reference.py) list it; and a first word near a subcommand that
is no program here is refused with the subcommand it meant (bin/envrun in a subprocess, as users run it)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
from pathlib import Path

import pytest

from envbuild.cli import envrun_main
from tests.conftest import REPO, run_cli

ENVRUN = str(REPO / "bin" / "envrun")


def test_every_entry_names_functions_that_exist() -> None:
    for name, subcommand in envrun_main.SUBCOMMANDS.items():
        assert callable(envrun_main.imported(subcommand.run)), name
        assert subcommand.parser is None or callable(envrun_main.imported(subcommand.parser)), name


@pytest.mark.parametrize("name", [name for name, sub in envrun_main.SUBCOMMANDS.items() if sub.parser])
def test_main_dispatches_each_subcommand_from_the_table(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        envrun_main.main([name, "--help"])
    assert done.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: envrun {name}")


def test_the_reference_lists_the_subcommands_of_the_table() -> None:
    spec = importlib.util.spec_from_file_location("gen_reference", REPO / "docs" / "gen_reference.py")
    assert spec is not None and spec.loader is not None
    gen_reference = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen_reference)
    assert gen_reference.envrun_subcommands() == ["sbatch", "sweep", "doctor", "kernel", "recipe", "shell"]
    assert "signal-ranks" in envrun_main.SUBCOMMANDS, "run by --requeue scripts: dispatched, not documented"


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """No config, no job; PATH with the tools bin/envrun needs and a directory of the test's own programs."""
    (tmp_path / "programs").mkdir()
    return {"HOME": str(tmp_path / "home"), "XDG_CONFIG_HOME": "", "ENVRUN_CONFIG": "", "ENVRUN_IMAGE": "",
            "ENVBUILD_SYSTEM": "local", "SLURM_JOB_ID": "", "SLURM_JOBID": "",
            "PATH": f"{tmp_path / 'programs'}{os.pathsep}/usr/bin{os.pathsep}/bin"}


def envrun(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return run_cli([ENVRUN, *args], env_extra=env, timeout=60, cwd=cwd)


@pytest.mark.parametrize(("options", "command", "meant"), [
    ([], ["kernal", "install"], "envrun kernel install"),
    (["--image", "env.sif"], ["sbtach", "-N", "2"], "envrun sbatch -N 2"),
    (["--dry-run"], ["shel"], "envrun shell"),
])
def test_a_mistyped_subcommand_is_refused_naming_it(tmp_path: Path, env: dict[str, str], options: list[str],
                                                    command: list[str], meant: str) -> None:
    done = envrun([*options, *command], env, tmp_path)
    assert done.returncode == 2 and done.stdout == "", done.stderr
    word = command[0]
    assert done.stderr.splitlines() == [
        f"error: {word!r} is neither an envrun subcommand nor a program on PATH here",
        f"  fix: did you mean `{meant}`? To run a program {word!r} that only the image has, put it after --: "
        + " ".join(["envrun", *options, "--", *command])]


def test_a_subcommand_after_the_options_is_refused_saying_where_it_goes(tmp_path: Path, env: dict[str, str]) -> None:
    done = envrun(["--image", "env.sif", "doctor", "--probe"], env, tmp_path)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "error: 'doctor' after envrun's options is the program to run, and none is on PATH here",
        "  fix: a subcommand is envrun's first word: `envrun doctor --probe`. To run a program 'doctor' that only "
        "the image has, put it after --: envrun --image env.sif -- doctor --probe"]


def test_after_double_dash_or_on_path_the_word_runs_as_given(tmp_path: Path, env: dict[str, str]) -> None:
    image = tmp_path / "env.sif"
    image.write_bytes(b"not opened by --dry-run\n")
    after_dashes = envrun(["--image", str(image), "--dry-run", "--", "kernal", "install"], env, tmp_path)
    assert after_dashes.returncode == 0 and "kernal install" in after_dashes.stdout, after_dashes.stderr
    program = tmp_path / "programs" / "shel"
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    on_path = envrun(["--image", str(image), "--dry-run", "shel"], env, tmp_path)
    assert on_path.returncode == 0 and "shel" in on_path.stdout, on_path.stderr
    far = envrun(["--image", str(image), "--dry-run", "docker", "ps"], env, tmp_path)
    assert far.returncode == 0, "docker is near no subcommand (doctor is not close enough): not checked"


def test_the_cheap_screen_never_drops_a_word_difflib_would_match() -> None:
    """The letters' bound screens before difflib loads: it must keep every word difflib finds near."""
    import difflib

    words = ["kernal", "kernl", "kernels", "sbtach", "sbach", "sweap", "swep", "doctr", "docter", "shel", "shelll",
             "sell", "signal-rank", "docker", "sleep", "bash", "torchrun", "python", "srun", "accelerate"]
    for word in words:
        for name in envrun_main.SUBCOMMANDS:
            if difflib.SequenceMatcher(None, word, name).ratio() >= envrun_main.NEAR_SUBCOMMAND:
                assert envrun_main._shared_letters_ratio(word, name) >= envrun_main.NEAR_SUBCOMMAND, (word, name)
