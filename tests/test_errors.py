"""The exit contract as the argparse commands keep it (envbuild.shared.errors.reporting_errors): our errors become a
message and an exit status, Ctrl-C exits 130, and a body that returns is passed through."""

from __future__ import annotations

import pytest

from envbuild.shared.errors import EXIT_INTERRUPTED, EXIT_PROBLEMS, EXIT_USAGE, EnvbuildError, UsageError, reporting_errors


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


def test_ctrl_c_exits_130_after_what_the_command_says(capsys: pytest.CaptureFixture[str]) -> None:
    def interrupted() -> None:
        raise KeyboardInterrupt

    with pytest.raises(SystemExit) as exit_info:
        reporting_errors(interrupted, interrupted="jobs already submitted keep running")
    assert exit_info.value.code == EXIT_INTERRUPTED == 130
    assert capsys.readouterr().err == "jobs already submitted keep running\n"


def test_other_exceptions_are_not_hidden() -> None:
    def bug() -> None:
        raise ZeroDivisionError

    with pytest.raises(ZeroDivisionError):
        reporting_errors(bug)
