"""The options the two tools share, defined once: their names, metavar and help, so that `--system` (or
`-o/--output`, `--dry-run`, `--json`, ...) reads the same in `envbuild build --help` and `envrun sbatch --help`.

Plain data and two small adapters: `add_option` puts one on an argparse parser (envrun), `click_option` makes a
click option (envbuild). A command adds what only it can say (`note`) and its own default (`default`), after the
shared words. envrun imports this module for its parsers only, never on the way to exec; it imports neither
click nor typing (envrun's start-up stays light: tests/test_architecture.py).

A renamed option keeps its old spelling as a hidden alias that says so on stderr (`add_renamed`): users'
scripts use the old spellings.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable
    from typing import Any, TypeVar

    F = TypeVar("F", bound=Callable[..., Any])

DURATION_FORMS = "90s, 30m, 2h, 1d, or Slurm's 1:30:00 (a bare number is minutes)"


class SharedOption:
    """One option as both tools show it: names (the long one first), metavar (None: a flag), help, and the
    default said after the help ("" for none). A plain slotted class: typed, and nothing to import."""

    __slots__ = ("default", "help", "metavar", "names")

    def __init__(self, names: tuple[str, ...], metavar: str | None, help: str, default: str = "") -> None:
        self.names = names
        self.metavar = metavar
        self.help = help
        self.default = default


SYSTEM = SharedOption(("--system",), "NAME", "the system recipe: a name (lumi-g, puhti) or a recipe file (./mysite.yaml)",
                      "$ENVBUILD_SYSTEM, else detected")
IMAGE = SharedOption(("--image",), "IMG", "the .sif image",
                     "$ENVRUN_IMAGE, else image: in envrun.yaml here or above, else the one *.sif here")
OVERLAY = SharedOption(("--overlay",), "FILE.sqsh",
                       "a venv overlay built by envbuild, mounted over the image (repeatable: later ones on top)")
FORCE_OVERLAY = SharedOption(("--force-overlay",), None,
                             "run an overlay on a base other than the one it was built for (with a warning)")
BIND = SharedOption(("--bind", "-B"), "SRC[:DEST[:OPTS]]", "an extra bind mount (repeatable)")
DRY_RUN = SharedOption(("--dry-run",), None, "run nothing, print what would run")
OUTPUT = SharedOption(("-o", "--output"), "FILE", "where to write the output")
JSON = SharedOption(("--json",), None, "print the report as JSON")
VERBOSE = SharedOption(("-v", "--verbose"), None, "stream every tool's output as it comes")
QUIET = SharedOption(("-q", "--quiet"), None, "print warnings, errors and the result only")
BUILD_LOG = SharedOption(("--log",), "FILE", "the build's log file", "<output>.build.log")
JOB_OUTPUT = SharedOption(("--job-output",), "PATTERN",
                          "the job's output file, as sbatch --output takes it (%x: job name, %j: job id)", "%x-%j.out")
TIME = SharedOption(("--time", "-t"), "DURATION", f"the job's time limit, e.g. {DURATION_FORMS}",
                    "batch: {time: ...} in the envrun config, else 1 hour")
ACCOUNT = SharedOption(("--account", "-A"), "ACCOUNT", "the project/budget the job is billed to",
                       "batch: {account: ...} in the envrun config, else $SBATCH_ACCOUNT")
PARTITION = SharedOption(("--partition", "-p"), "PARTITION", "the Slurm partition", "the smallest that fits")
TEST_PARTITION = SharedOption(("--test",), None, "use the system's test/development partition")
CACHE_DIR = SharedOption(("--cache-dir",), "DIR", "the build store, e.g. a project directory on the parallel file system",
                         "$ENVBUILD_CACHE_DIR, else $XDG_CACHE_HOME/envbuild, else ~/.cache/envbuild")

SHARED = {"system": SYSTEM, "image": IMAGE, "overlay": OVERLAY, "force-overlay": FORCE_OVERLAY, "bind": BIND,
          "dry-run": DRY_RUN, "output": OUTPUT, "json": JSON, "verbose": VERBOSE, "quiet": QUIET, "log": BUILD_LOG,
          "job-output": JOB_OUTPUT, "time": TIME, "account": ACCOUNT, "partition": PARTITION,
          "test": TEST_PARTITION, "cache-dir": CACHE_DIR}


def help_text(option: SharedOption, *, note: str = "", default_help: str | None = None) -> str:
    """The shared help, then what this command adds, then the default (the shared one unless the command
    has its own): 'the system recipe, e.g. lumi-g or puhti (default: $ENVBUILD_SYSTEM, else detected)'."""
    said = option.default if default_help is None else default_help
    return option.help + (f"; {note}" if note else "") + (f" (default: {said})" if said else "")


def add_option(parser: argparse._ActionsContainer, option: SharedOption, *, note: str = "", default_help: str | None = None,
               **kwargs: Any) -> argparse.Action:
    """Add `option` to an argparse parser (or group); `kwargs` (dest, action, default, type, metavar) as
    argparse takes them. The help is escaped for argparse's %-formatting, which click does not do."""
    if option.metavar is None:
        kwargs.setdefault("action", "store_true")
    else:
        kwargs.setdefault("metavar", option.metavar)
    return parser.add_argument(*option.names, help=help_text(option, note=note, default_help=default_help).replace("%", "%%"), **kwargs)


def click_option(option: SharedOption, *param_decls: str, note: str = "", default_help: str | None = None,
                 **kwargs: Any) -> Callable[[F], F]:
    """A click option made from `option`; `param_decls` (e.g. the parameter's name) and `kwargs` as click
    takes them."""
    import click

    if option.metavar is None:
        kwargs.setdefault("is_flag", True)
    else:
        kwargs.setdefault("metavar", option.metavar)
    return click.option(*option.names, *param_decls, help=help_text(option, note=note, default_help=default_help), **kwargs)


def duration_type(where: str, *, bare: str | None = "m") -> Callable[[str], int]:
    """An argparse `type` for a time option that takes the one duration grammar (envbuild.shared.durations) and gives
    seconds; a value outside it is argparse's usage error (exit 2), with the forms to write instead."""
    import argparse

    from envbuild.shared.durations import parse_duration
    from envbuild.shared.errors import UsageError

    def seconds(text: str) -> int:
        try:
            return parse_duration(text, where, bare=bare)
        except UsageError as exc:
            raise argparse.ArgumentTypeError(f"{exc.message.removeprefix(where + ': ')}; fix: {exc.hint}") from None

    return seconds


def add_renamed(parser: argparse._ActionsContainer, old: str, option: SharedOption, *, dest: str) -> None:
    """`old` keeps working as a hidden alias of `option` (same dest, same value or flag), with a one-line
    note on stderr each time it is used."""
    import argparse

    new = "/".join(option.names)

    class RenamedOption(argparse.Action):
        def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                     option_string: str | None = None) -> None:
            print(f"{parser.prog}: note: {old} is now {new}; {old} still works but will go", file=sys.stderr)
            setattr(namespace, self.dest, True if option.metavar is None else values)

    parser.add_argument(old, dest=dest, action=RenamedOption, nargs=0 if option.metavar is None else None,
                        default=argparse.SUPPRESS, help=argparse.SUPPRESS)
