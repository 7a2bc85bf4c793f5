"""What both CLIs share: turning our errors into a message and an exit code, never a traceback."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import ParamSpec, TypeVar

import click

from envbuild.shared.errors import EXIT_INTERRUPTED, EnvbuildError, UsageError
from envbuild.shared.interrupts import Interrupted, interruptible

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
    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            with interruptible():
                return func(*args, **kwargs)
        except EnvbuildError as exc:
            click.echo(exc.render(), err=True)
            sys.exit(exc.exit_code)
        except Interrupted as exc:
            # What was cleaned up has been said by the executor; the exit code says which signal it was.
            click.echo(f"interrupted by {exc.name}", err=True)
            sys.exit(exc.exit_code)
        except KeyboardInterrupt:
            click.echo("interrupted by SIGINT", err=True)
            sys.exit(EXIT_INTERRUPTED)

    return wrapper
