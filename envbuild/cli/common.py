"""envbuild's click commands and the exit contract: option values checked with our errors, and a command's body
ended as every command ends (envbuild.shared.errors.reporting_errors), never with a traceback."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import ParamSpec, TypeVar

import click

from envbuild.shared.errors import UsageError, reporting_errors

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")


def checked_value(check: Callable[[str], T]) -> Callable[[click.Context, click.Parameter, str | None], T | None]:
    """A click callback that reads an option's value with `check`: our UsageError becomes click's usage error
    (exit 2, the option named, the fix kept) instead of a traceback, since callbacks run before the command's
    own error handling (reports_errors)."""

    def callback(ctx: click.Context, param: click.Parameter, value: str | None) -> T | None:
        if value is None:
            return None
        try:
            return check(value)
        except UsageError as exc:
            message = next((exc.message.removeprefix(f"{name}: ") for name in param.opts
                            if exc.message.startswith(f"{name}: ")), exc.message)  # click names the option itself
            raise click.BadParameter(message + (f"\n  fix: {exc.hint}" if exc.hint else ""), ctx, param) from None

    return callback


def reports_errors(func: Callable[P, R]) -> Callable[P, R]:
    """A click command's body run as every command ends (envbuild.shared.errors.reporting_errors)."""

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        return reporting_errors(lambda: func(*args, **kwargs))

    return wrapper


def exit_with(status: int) -> None:
    """End a click command with the exit status its command returned; 0 returns, and click ends as usual."""
    if status:
        sys.exit(status)
