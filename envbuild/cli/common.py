"""What both CLIs share: turning our errors into a message and an exit code, never a traceback."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from envbuild.errors import EnvbuildError
from envbuild.interrupts import Interrupted, interruptible

F = TypeVar("F", bound=Callable[..., Any])


def reports_errors(func: F) -> F:
    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
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
            sys.exit(130)

    return wrapper  # type: ignore[return-value]
