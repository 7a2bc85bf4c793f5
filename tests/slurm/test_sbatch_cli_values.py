"""`envrun sbatch` from the command line with values that would break a script (issue 28): a newline in
--job-name, --log, --account (given, from the config or $SBATCH_ACCOUNT) or a word of the command is refused
with the option named and exit 2; a job name with `/` or quotes becomes a safe file name under .envrun/jobs."""

from __future__ import annotations

from pathlib import Path

import pytest

from envbuild.cli.sbatch_cmd import file_name
from tests.cli.test_sbatch_cmd import project, run  # noqa: F401 - the fixture is used by name


@pytest.mark.parametrize(("argv", "where"), [
    (["-J", "a\ntouch PWNED"], "--job-name: 'a\\ntouch PWNED' holds a newline (at character 2)"),
    (["--job-output", "x\n.out"], "--job-output: 'x\\n.out' holds a newline"),
    (["-A", "p\r"], "--account: 'p\\r' holds a carriage return"),
    (["-p", "debug\x1b[2J"], "--partition: 'debug\\x1b[2J' holds the control character \\x1b"),
])
def test_options_with_a_newline_are_refused(project: Path, capsys: pytest.CaptureFixture[str],  # noqa: F811
                                            argv: list[str], where: str) -> None:
    assert run(["--system", "local", *argv, "--", "python", "train.py"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert f"error: {where}" in captured.err and "fix: give " in captured.err


def test_a_command_word_with_a_newline_is_refused(project: Path, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    assert run(["--system", "local", "--", "python", "train.py", "--tag", "a\nb"]) == 2
    assert "error: word 4 of the training command: 'a\\nb' holds a newline" in capsys.readouterr().err


def test_an_account_from_the_config_or_the_environment_is_named(project: Path, capsys: pytest.CaptureFixture[str],  # noqa: F811
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    (project / "envrun-config.yaml").write_text("batch: {account: \"p\\nq\"}\n")
    assert run(["--system", "local", "--", "python", "train.py"]) == 2
    assert "error: the envrun config (batch.account): 'p\\nq' holds a newline" in capsys.readouterr().err
    (project / "envrun-config.yaml").write_text("{}\n")
    monkeypatch.setenv("SBATCH_ACCOUNT", "p\nq")
    assert run(["--system", "local", "--", "python", "train.py"]) == 2
    assert "error: $SBATCH_ACCOUNT: 'p\\nq' holds a newline" in capsys.readouterr().err


def test_a_job_name_becomes_a_file_name_inside_the_jobs_directory() -> None:
    assert file_name("../../etc/x y'$(z)") == "_.._etc_x_y___z_"
    assert file_name("..") == "job" and file_name("train-1.5") == "train-1.5"
