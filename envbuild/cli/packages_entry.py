"""`envbuild packages` without click: the command line read by hand where it is one of the usual ones (images,
--grep, --no-cache, --json, --matrix), so a listing answered from the index loads neither click nor the reader
(tests/test_architecture.py keeps it so). Any other command line (--help, --overlay, --via-runtime, an option
given twice, a value that looks like an option) goes to click, which reads it as it always has."""

from __future__ import annotations

import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

_FLAGS = {"--no-cache": "no_cache", "--json": "as_json", "--matrix": "as_matrix"}


def simple_packages_line(argv: Sequence[str]) -> dict[str, object] | None:
    """The options of `packages ARGS` as list_packages takes them, when ARGS holds only images and the usual
    options, each at most once; None for anything click should read."""
    if not argv or argv[0] != "packages":
        return None
    options: dict[str, object] = {"pattern": None, "no_cache": False, "as_json": False, "as_matrix": False}
    images: list[str] = []
    seen: set[str] = set()
    words = iter(argv[1:])
    for word in words:
        if not word.startswith("-"):
            images.append(word)
            continue
        name, equals, value = word.partition("=")
        if name in seen:
            return None
        seen.add(name)
        if name in _FLAGS and not equals:
            options[_FLAGS[name]] = True
        elif name == "--grep":
            if not equals:
                value = next(words, "")
                if not value or value.startswith("-"):
                    return None
            options["pattern"] = value
        else:
            return None  # -h, --help, --, -, --overlay, --via-runtime, a misspelt option: click's to read
    if not images:
        return None
    return {"images": images, **options}


def answer_packages(argv: Sequence[str]) -> bool:
    """Run `envbuild packages` for `argv` (the words after the program's name) and exit with its status when the
    line is a simple one; False, having done nothing, when click should read it."""
    line = simple_packages_line(argv)
    if line is None:
        return False
    from envbuild.shared.errors import EXIT_PROBLEMS, reporting_errors

    def listing() -> int:
        from envbuild.commands.packages import list_packages

        return list_packages(line.pop("images"), overlays=(), via_runtime=False, out=sys.stdout, err=sys.stderr,  # type: ignore[arg-type]
                             **line)  # type: ignore[arg-type]

    try:
        status = reporting_errors(listing)
        sys.stdout.flush()
    except BrokenPipeError:  # `envbuild packages ... | head`: as click ends then, quietly
        sys.stdout = _FlushQuietly(sys.stdout)
        sys.exit(EXIT_PROBLEMS)
    sys.exit(status)


class _FlushQuietly:
    """The standard output after its reader left: the flush at exit says nothing (click's way)."""

    def __init__(self, stream: object) -> None:
        self._stream = stream

    def flush(self) -> None:
        try:
            self._stream.flush()  # type: ignore[attr-defined]
        except OSError:
            pass

    def __getattr__(self, name: str) -> object:
        return getattr(self._stream, name)
