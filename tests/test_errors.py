"""The exit contract of both tools, kept in one place (envbuild.shared.errors.reporting_errors; click's commands
through envbuild.cli.common.reports_errors): our errors become a message and an exit status, an interruption
(Ctrl-C, or SIGTERM/SIGHUP caught while the body runs) says which signal and exits 128 + its number, and a
body that returns is passed through."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable

import click
import pytest
from click.testing import CliRunner

from envbuild.cli.common import reports_errors
from envbuild.shared.errors import EXIT_INTERRUPTED, EXIT_PROBLEMS, EXIT_USAGE, EnvbuildError, UsageError, reporting_errors
from envbuild.shared.interrupts import Interrupted


def through_click(body: Callable[[], object]) -> tuple[int, str]:
    """(exit status, stderr) of `body` run as an envbuild command."""

    @click.command()
    @reports_errors
    def command() -> None:
        body()

    result = CliRunner().invoke(command, [])
    return result.exit_code, result.stderr


def test_a_returned_status_is_passed_through() -> None:
    assert reporting_errors(lambda: 3) == 3


@pytest.mark.parametrize(("error", "status"), [(EnvbuildError("the step failed", "read its log"), EXIT_PROBLEMS),
                                               (UsageError("--time: 'x' is no duration", "e.g. --time 2h"), EXIT_USAGE)])
def test_our_error_exits_with_its_message_and_status(error: EnvbuildError, status: int,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    def fail() -> None:
        raise error

    with pytest.raises(SystemExit) as exit_info:
        reporting_errors(fail)
    assert exit_info.value.code == status
    assert capsys.readouterr().err == f"error: {error.message}\n  fix: {error.hint}\n"
    assert through_click(fail) == (status, f"error: {error.message}\n  fix: {error.hint}\n")


def test_ctrl_c_exits_130_naming_the_signal_then_what_the_command_says(capsys: pytest.CaptureFixture[str]) -> None:
    def interrupted() -> None:
        raise KeyboardInterrupt

    with pytest.raises(SystemExit) as exit_info:
        reporting_errors(interrupted, interrupted="jobs already submitted keep running")
    assert exit_info.value.code == EXIT_INTERRUPTED == 130
    assert capsys.readouterr().err == "interrupted by SIGINT: jobs already submitted keep running\n"
    assert through_click(interrupted) == (130, "interrupted by SIGINT\n")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_an_interruption_ends_both_tools_alike(signum: int, capsys: pytest.CaptureFixture[str]) -> None:
    """An Interrupted raised in the body (what an executor re-raises after its cleanup) and a real signal
    that arrives while the body runs end the argparse and the click commands the same way."""
    def raised() -> None:
        raise Interrupted(signum)

    def signalled() -> None:
        os.kill(os.getpid(), signum)
        raise AssertionError("the signal interrupts the body")

    name = signal.Signals(signum).name
    before = signal.getsignal(signum)  # SIG_DFL in a fresh process; another test's own handler otherwise
    for body in (raised, signalled):
        with pytest.raises(SystemExit) as exit_info:
            reporting_errors(body)
        assert (exit_info.value.code, capsys.readouterr().err) == (128 + signum, f"interrupted by {name}\n")
        assert through_click(body) == (128 + signum, f"interrupted by {name}\n")
    assert signal.getsignal(signum) is before, "the handler is put back"


def test_without_catch_signals_the_handlers_stay_as_they_were() -> None:
    """The launch: signals are left to exec and to the srun supervisor."""
    seen = []
    before = signal.getsignal(signal.SIGTERM)
    assert reporting_errors(lambda: seen.append(signal.getsignal(signal.SIGTERM)), catch_signals=False) is None
    assert seen == [before]


def test_other_exceptions_are_not_hidden() -> None:
    def bug() -> None:
        raise ZeroDivisionError

    with pytest.raises(ZeroDivisionError):
        reporting_errors(bug)


def test_commands_exit_with_the_named_kinds() -> None:
    """sys.exit / SystemExit with a number written out would be a kind of problem defined twice: every exit
    status of envbuild/ is one of envbuild.shared.errors' EXIT_* (or a status passed through: a job's, srun's)."""
    import ast
    from pathlib import Path

    package = Path(__file__).resolve().parent.parent / "envbuild"
    literal = []
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and ast.unparse(node.func) in ("sys.exit", "SystemExit", "exit")
                    and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, int)):
                literal.append(f"{path.relative_to(package.parent)}:{node.lineno}: {ast.unparse(node)}")
    assert literal == []
