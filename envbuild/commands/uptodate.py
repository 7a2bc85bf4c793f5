"""`envbuild build` of an output that is already up to date, answered without building the spec's models.

The full path decides that an output is up to date from the layer keys: it validates the spec (pydantic),
reads the lock, the recipe, the host's package sources and the store's base digest, and compares the image
key with the one recorded inside the output. When it finds the output up to date, it leaves a record of
that verdict in the user's own cache (envbuild.host.usercache): every input it read, each as a digest of its
bytes (or of its file status where the bytes are an image), and what it printed. The next identical command
(same arguments, working directory, environment, envbuild code and Python) recomputes those digests with
the standard library only and, when every one agrees, prints the same lines without importing click,
pydantic or yaml. Any difference, a missing or unreadable record, or an option that never makes a no-op
(--dry-run, --upgrade, --help) falls through to the full path, which decides again and writes a new record.

Light on purpose, like envrun's launch path: os, sys, hashlib and marshal (through usercache) only.
"""

from __future__ import annotations

import hashlib
import os
import sys

from envbuild import __version__

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping
    from typing import Any, TextIO

# Bump when what a record holds or how an input is digested changes: older records are then never read.
RECORD_FORMAT = 1
# Options with which a build is never a no-op, or prints something else than the build's result.
NEVER_A_NOOP = frozenset({"--dry-run", "--upgrade", "-h", "--help", "--version"})
# Variables that change between shells but not what a build reads (the working directory is keyed itself).
NOT_READ_BY_A_BUILD = frozenset({"PWD", "OLDPWD", "SHLVL", "_"})
# The kinds of input a record holds, each digested by _digest: a file's bytes, a directory tree's content, a
# directory's names, a file's status (an image: its bytes would cost what the check saves), whether a directory
# may be written (the output's: the full path refuses one it cannot write).
INPUT_KINDS = ("content", "tree", "listing", "status", "access")

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The invocation key of this process's command, when the light check missed; then the lock file and its digest
# as the full path found it (note_lock_before).
_pending: list[str] = []


def invocation_key(argv: list[str], environ: Mapping[str, str] | None = None) -> str:
    """Everything besides the recorded inputs that may change what `envbuild ARGV` does: the arguments, the
    working directory, the environment, the terminal, the user, Python, and envbuild's own code."""
    environ = os.environ if environ is None else environ
    digest = hashlib.sha256()
    for part in (str(RECORD_FORMAT), __version__, sys.executable, sys.version, os.getcwd(), str(os.geteuid()),
                 repr([os.isatty(fd) for fd in (0, 1, 2)]), *argv):
        digest.update(part.encode("utf-8", "surrogateescape") + b"\0")
    digest.update(b"\1")
    for name in sorted(environ):
        if name not in NOT_READ_BY_A_BUILD:
            digest.update(f"{name}={environ[name]}".encode("utf-8", "surrogateescape") + b"\0")
    digest.update(b"\1")
    for entry in [*_code_files(_PACKAGE_DIR), *_import_directories()]:
        digest.update(entry.encode("utf-8", "surrogateescape") + b"\0")
    return digest.hexdigest()


def _import_directories() -> list[str]:
    """The directories Python imports from, with their times: a package installed, removed or upgraded there
    (pydantic, PyYAML: what validates the spec) changes the directory."""
    found = []
    for directory in sys.path:
        if directory in ("", "."):  # the working directory (python -c): keyed by its path, and outputs go there
            continue
        try:
            status = os.stat(directory)
        except OSError:
            continue
        found.append(f"{directory}:{status.st_ino}:{status.st_mtime_ns}:{status.st_ctime_ns}")
    return found


def _code_files(directory: str) -> list[str]:
    """Each of envbuild's modules with its size and modification time: edited code is another invocation."""
    found = []
    pending = [directory]
    while pending:
        with os.scandir(pending.pop()) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    if entry.name != "__pycache__":
                        pending.append(entry.path)
                elif entry.name.endswith((".py", ".yaml")):
                    status = entry.stat(follow_symlinks=False)
                    found.append(f"{entry.path}:{status.st_size}:{status.st_mtime_ns}")
    return sorted(found)


def _record_name(key: str) -> str:
    return f"noop-build-{key[:32]}.marshal"


def may_be_a_noop(argv: list[str]) -> bool:
    return argv[:1] == ["build"] and not NEVER_A_NOOP.intersection(argv)


def answer_if_up_to_date(argv: list[str], out: TextIO) -> bool:
    """Print what the full path printed when it last found this command's output up to date, and True, when
    every input it read then is unchanged; False (nothing printed) on any difference or doubt. Either way the
    command's key is kept for the full path's record (remember_verdict)."""
    from envbuild.host.usercache import MISS, read_cached

    started = _monotonic()
    try:
        key = invocation_key(argv)
    except OSError:  # the working directory or envbuild's own code unreadable: the full path says what is wrong
        return False
    _pending[:] = [key]
    record = read_cached(_record_name(key), key, _is_record)
    if record is MISS:
        return False
    if any(_digest(kind, path) != digest for kind, path, digest in record["inputs"]):
        return False
    out.write(f"{record['said']}{record['result']} ({_monotonic() - started:.2f} s)\n")
    out.flush()
    return True


def _monotonic() -> float:
    import time  # already loaded by the interpreter's start-up

    return time.monotonic()


def _is_record(value: Any) -> bool:
    return (type(value) is dict and type(value.get("said")) is str and type(value.get("result")) is str
            and type(value.get("inputs")) is list
            and all(type(item) is list and len(item) == 3 and item[0] in INPUT_KINDS
                    and all(type(part) is str for part in item) for item in value["inputs"]))


def note_lock_before(lock: str) -> None:
    """The spec's lock file as the command found it, before a stale one is resolved again and rewritten: a
    verdict after that printed the resolution, which the next command would not, so it is not recorded."""
    if _pending:
        _pending[1:] = [lock, _digest("content", lock)]


def remember_verdict(inputs: Iterable[tuple[str, str]], said: str, result: str) -> None:
    """After the full path found the output up to date: record its inputs' digests now, what it printed
    before its result line, and that line without its time, for the next identical command. Only a command
    that came through the light check (answer_if_up_to_date) has a key to record under."""
    if not _pending:
        return
    from envbuild.host.usercache import write_cached

    key = _pending[0]
    if len(_pending) == 3 and _digest("content", _pending[1]) != _pending[2]:
        return  # this command rewrote the lock (and said so)
    unique = dict.fromkeys((kind, os.path.abspath(path)) for kind, path in inputs)
    record = {"said": said, "result": result,
              "inputs": [[kind, path, _digest(kind, path)] for kind, path in unique]}
    write_cached(_record_name(key), key, record)


def _digest(kind: str, path: str) -> str:
    """The input's state as a string: equal strings mean the full path would read the same."""
    try:
        if kind == "content":
            with open(path, "rb") as handle:
                return hashlib.sha256(handle.read()).hexdigest()
        if kind == "tree":
            from envbuild.shared.treedigest import file_digest, tree_digest

            return tree_digest(path) if os.path.isdir(path) else file_digest(path)
        if kind == "listing":
            return "\0".join(sorted(os.listdir(path)))
        if kind == "access":
            status = os.stat(path)
            return f"{os.access(path, os.W_OK)}:{status.st_mode}:{status.st_uid}:{status.st_gid}"
        if kind == "status":
            status, link = os.stat(path), os.lstat(path)
            return ":".join(str(value) for value in (
                status.st_dev, status.st_ino, status.st_mode, status.st_uid, status.st_size, status.st_mtime_ns,
                status.st_ctime_ns, link.st_ino, link.st_mode, link.st_ctime_ns))
    except OSError as error:  # absent, a directory, unreadable: recorded as such, and compared as such
        return f"error:{type(error).__name__}"
    return f"unknown kind {kind}"
