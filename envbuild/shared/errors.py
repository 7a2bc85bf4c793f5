"""Error types that the CLIs turn into a clear message and an exit code (never a traceback)."""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # typing is not imported on envrun's launch path (tests/test_architecture.py)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import TypeVar

    T = TypeVar("T")

# The exit status of every command of both tools: one per kind of problem, whichever command meets it (a spec
# with problems exits 2 from `envbuild validate`, `build` and `lock` alike). The errors below carry theirs; a
# command that reports findings returns one of these; exit_status_help says them in every --help.
EXIT_CLEAN = 0  # nothing wrong (warnings allowed, unless a command's --strict says otherwise)
EXIT_PROBLEMS = 1  # problems found: what a check found (a mismatch, a script's errors), a failed build, launch or job
EXIT_USAGE = 2  # input that cannot be used as given (nothing was done): an option, a value, a missing file, a
#                 spec's problems
EXIT_INTERRUPTED = 130  # Ctrl-C: 128 + SIGINT, as the shell reports a command it interrupted; SIGTERM 143, SIGHUP 129


def exit_status_help(problems: str = "a failed build, launch or job, or what a check found") -> str:
    """The contract as a --help epilog says it; `problems`: what exit status 1 means for this command."""
    return ("exit status:\n  0  clean\n  1  problems found: " + problems + "\n"
            "  2  usage error: an option, value or input (a spec with problems) that cannot be used as given\n"
            "  128+N  interrupted by signal N (130: Ctrl-C)\n")


def reporting_errors(call: Callable[[], T], *, interrupted: str = "", catch_signals: bool = True) -> T:
    """Run a command's body the way every command of both tools ends (argparse's directly, click's through
    envbuild.cli.common.reports_errors): an EnvbuildError exits with its message on stderr and its exit code,
    never a traceback; an interruption says `interrupted by SIGNAL`, then `interrupted` where the command has
    something to add (what is left running), and exits 128 + the signal's number. What `call` returns is
    returned.

    With `catch_signals`, SIGTERM (Slurm's time limit, scancel) and SIGHUP (a closed terminal) interrupt the body
    as Ctrl-C does (envbuild.shared.interrupts), so what it started is cleaned up instead of left behind. The
    launch leaves them alone (catch_signals=False): it execs the program, or stays srun's parent and forwards
    them to srun (envbuild.launch.supervise), and loads nothing more on its way."""
    try:
        if not catch_signals:
            return call()
        from envbuild.shared.interrupts import interruptible

        with interruptible():
            return call()
    except EnvbuildError as exc:
        print(exc.render(), file=sys.stderr)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        _say_interrupted("SIGINT", interrupted)
        sys.exit(EXIT_INTERRUPTED)
    except BaseException as exc:
        # Only interruptible()'s handler raises Interrupted: when its module was never loaded, none is on its way
        # (and the launch does not load it, nor signal's enum, for this check).
        interrupts = sys.modules.get("envbuild.shared.interrupts")
        if interrupts is None or not isinstance(exc, interrupts.Interrupted):
            raise
        _say_interrupted(exc.name, interrupted)
        sys.exit(exc.exit_code)


def _say_interrupted(signal_name: str, note: str) -> None:
    """What was cleaned up has been said by the executor; this names the signal, and what the command adds."""
    print(f"interrupted by {signal_name}" + (f": {note}" if note else ""), file=sys.stderr)


class EnvbuildError(Exception):
    """A failure the user can act on. `hint` says how to fix it."""

    exit_code = EXIT_PROBLEMS

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def render(self) -> str:
        text = f"error: {self.message}"
        if self.hint:
            text += f"\n  fix: {self.hint}"
        return text


class UsageError(EnvbuildError):
    """Bad input from the command line or a spec: exit code 2, like click's usage errors."""

    exit_code = EXIT_USAGE


class SpecError(UsageError):
    """One or more problems in a spec file, each located at file:line:column."""

    def __init__(self, problems: list[SpecProblem]) -> None:
        self.problems = problems
        super().__init__("\n".join(p.render() for p in problems))

    def render(self) -> str:
        count = len(self.problems)
        head = f"error: {count} problem{'s' if count != 1 else ''} in spec"
        return head + "\n" + "\n".join(p.render() for p in self.problems)


class SpecProblem:
    """One located problem: where (file, line, column, field path), what, and how to fix it."""

    def __init__(
        self, file: str, line: int, column: int, field: str, message: str, hint: str | None = None
    ) -> None:
        self.file = file
        self.line = line
        self.column = column
        self.field = field
        self.message = message
        self.hint = hint

    def render(self) -> str:
        where = f"{self.file}:{self.line}:{self.column}"
        text = f"{where}: {self.field or '(top level)'}: {self.message}"
        if self.hint:
            text += f"\n    fix: {self.hint}"
        return text

    def __repr__(self) -> str:
        return f"SpecProblem({self.render()!r})"


class ToolError(EnvbuildError):
    """An external tool (apptainer, debootstrap, pip, srun) failed."""

    exit_code = EXIT_PROBLEMS


class ImageFormatError(EnvbuildError):
    """The file is not a SIF image, or it is truncated or damaged, or uses something we cannot read.
    The message may quote the image (a record's field, a path inside it): it is kept printable, whichever
    command prints it."""

    def __init__(self, path: str, message: str, hint: str | None = None) -> None:
        from envbuild.shared.terminaltext import printable  # a failure's import: not on envrun's every launch

        super().__init__(printable(f"{path}: {message}"), None if hint is None else printable(hint))
        self.path = path
        self.reason = printable(message)
