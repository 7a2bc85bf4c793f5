"""Which host paths in the user's command the container will see, and the bind that makes the program visible.

A container sees a host path at the same path only under a bind whose destination is its source: the recipe's
binds, the envrun config's and the project's, --bind, $APPTAINER_BIND / $SINGULARITY_BIND, the working directory
(envrun binds it), and what apptainer mounts by default: $HOME (apptainer.conf `mount home`) and /tmp, /var/tmp
(`mount tmp`), unless the recipe's runtime flags turn them off (--no-home, --contain, --containall, --no-mount).
A site's apptainer.conf may turn those defaults off as well; envrun does not read it on the launch path.

The program file (`python PATH`, `torchrun PATH`, `accelerate launch PATH`, `deepspeed PATH`) outside all of
these is bound read-only by its directory: without it every rank fails with "can't open file", after the queue.
Other existing paths outside them get a warning with the --bind fix: envrun cannot tell cheaply whether the
image has its own copy at that path, so it does not act on them. Paths under the system directories (/usr,
/etc, ...) are the image's own inside the container: never bound, never warned about.

Pure over a `HostPaths` (the few stat calls it makes are the caller's, memoized); light: envrun's launch path.
"""

from __future__ import annotations

import os

from envbuild.launch.args import (
    NODE_LAUNCHERS,
    is_python,
    launcher_has,
    launcher_of,
    launcher_split,
    python_program,
    split_srun,
    torchrun_options_end,
)
from envbuild.shared.errors import UsageError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

# The container's own system directories: a bind over them would hide the image's files.
SYSTEM_DIRS = ("/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc", "/run", "/sbin",
               "/sys", "/usr", "/var")
BIND_VARIABLES = ("APPTAINER_BIND", "SINGULARITY_BIND", "APPTAINER_BINDPATH", "SINGULARITY_BINDPATH")
CONTAIN_FLAGS = ("-c", "--contain", "-C", "--containall")
# apptainer.conf `mount tmp = yes` (the default): the host's own, shown as they are (no files are made there)
RUNTIME_TMP_MOUNTS = ("/tmp", "/var/tmp")  # noqa: S108


class HostPaths:
    """What this host's file system says about a path: (real path, is a directory), None when nothing is there.
    Memoized; a test overrides `look` with a table."""

    __slots__ = ("_seen",)

    def __init__(self) -> None:
        self._seen: dict[str, tuple[str, bool] | None] = {}

    def found(self, path: str) -> tuple[str, bool] | None:
        if path not in self._seen:
            self._seen[path] = self.look(path)
        return self._seen[path]

    def look(self, path: str) -> tuple[str, bool] | None:
        try:
            mode = os.stat(path).st_mode  # one stat for "is there" and "a directory" (links followed)
        except (OSError, ValueError):  # nothing there, a word with a NUL byte, a name too long: no host path
            return None
        return os.path.realpath(path), mode & 0o170000 == 0o040000  # S_ISDIR, without importing stat


class Visibility:
    """What the container will not see: binds added for the program (`DIR:DIR:ro`), and why; warnings."""

    __slots__ = ("binds", "notes", "warnings")

    def __init__(self) -> None:
        self.binds: list[str] = []
        self.notes: list[str] = []
        self.warnings: list[str] = []


def is_under(path: str, root: str) -> bool:
    return root == "/" or path == root or path.startswith(root.rstrip("/") + "/")


def system_dir(path: str) -> bool:
    return path == "/" or any(is_under(path, top) for top in SYSTEM_DIRS)


def same_path_bind(spec: str) -> str | None:
    """The host directory a bind spec `SRC[:DEST[:OPTS]]` shows at its own path, None when DEST differs."""
    source, _, rest = spec.partition(":")
    dest = rest.split(":", 1)[0] if rest else source
    if not source.startswith("/") or os.path.normpath(dest) != os.path.normpath(source):
        return None
    return os.path.normpath(source)


def visible_roots(binds: list[str], flags: tuple[str, ...], environ: Mapping[str, str]) -> list[str]:
    """The host directories the container shows at their own path: `binds` (every bind envrun passes, the
    working directory first), the runtime's bind variables, and the runtime's default mounts that `flags` leave."""
    specs = [*binds]
    for name in BIND_VARIABLES:
        specs += [spec.strip() for spec in environ.get(name, "").split(",") if spec.strip()]
    no_mount: set[str] = set()
    for index, flag in enumerate(flags):
        if flag == "--no-mount" and index + 1 < len(flags):
            no_mount.update(flags[index + 1].split(","))
        elif flag.startswith("--no-mount="):
            no_mount.update(flag.split("=", 1)[1].split(","))
    contained = any(flag in CONTAIN_FLAGS for flag in flags)
    home = environ.get("HOME", "")
    if not contained and "--no-home" not in flags and "home" not in no_mount and home.startswith("/") and home != "/":
        specs.append(home)
    if not contained and "tmp" not in no_mount:
        specs += list(RUNTIME_TMP_MOUNTS)
    roots = [root for root in map(same_path_bind, specs) if root]
    return list(dict.fromkeys(roots))


def program_file_index(words: tuple[str, ...]) -> int | None:
    """Where in `words` (a command, maybe under srun) the program file is that its launcher runs: the script of
    `python [opts] PATH`, `torchrun [opts] PATH`, `accelerate launch [opts] PATH`, `deepspeed [opts] PATH`, each
    launcher in every spelling envbuild.launch.args.launcher_of knows (`python -m torch.distributed.run`, ...).
    None when the program is a module (-m), code (-c) or unknown."""
    if not words:
        return None
    start = 0
    if os.path.basename(words[0]) == "srun":
        start = len(words) - len(split_srun(words)[1])
    elif os.path.basename(words[0]) == "env":
        start = 1
        while start < len(words) and "=" in words[start] and not words[start].startswith("-"):
            start += 1
    if start >= len(words):
        return None
    if start:
        inner = program_file_index(words[start:])
        return None if inner is None else start + inner
    kind, size = launcher_of(words)
    if kind == "torchrun":
        return _after_torchrun(words, size)
    if kind in NODE_LAUNCHERS:
        head, own, rest = launcher_split(kind, words)
        if not rest or launcher_has(own, "-m", "--module"):
            return None
        at = len(head) + len(own) + (rest[0] == "--")
        if launcher_has(own, "--no_python"):
            inner = program_file_index(words[at:])
            return None if inner is None else at + inner
        return at if at < len(words) else None
    started = python_program(words) if is_python(words[0]) else None
    return started[1] if started is not None and not started[0] else None  # a script; not a module or -c code


def _after_torchrun(words: tuple[str, ...], start: int) -> int | None:
    args = words[start:]
    end = torchrun_options_end(args)
    own = args[:end]
    if any(word in ("-m", "--module") for word in own):
        return None
    at = start + end + (end < len(args) and args[end] == "--")
    if any(word.replace("_", "-") == "--no-python" for word in own):
        inner = program_file_index(words[at:])
        return None if inner is None else at + inner
    return at if at < len(words) else None


# Options whose value names a file the program reads at its start (a training config): a missing one fails the
# job as surely as a missing program file. Only values with these endings are taken as files.
_CONFIG_OPTIONS = ("--config", "--config-file", "--config_file", "--cfg", "--deepspeed_config", "--deepspeed-config")
_CONFIG_ENDINGS = (".yaml", ".yml", ".json", ".toml", ".cfg", ".ini", ".py")


def files_opened_at_start(words: tuple[str, ...]) -> list[str]:
    """The files a command opens at once, as written: its program file (program_file_index) and the value of a
    config option (`--config run.yaml`, `--config=run.yaml`) that names a file by its ending. Words with `$`
    or a backquote are left out: what they hold is decided when the job runs."""
    found: list[str] = []
    at = program_file_index(words)
    if at is not None:
        found.append(words[at])
    for index, word in enumerate(words):
        name, equals, value = word.partition("=")
        if name not in _CONFIG_OPTIONS:
            continue
        value = value if equals else (words[index + 1] if index + 1 < len(words) else "")
        if value.endswith(_CONFIG_ENDINGS):
            found.append(value)
    return [path for path in dict.fromkeys(found) if path and "$" not in path and "`" not in path]


def missing_files(words: tuple[str, ...], start_dir: str, exists: Callable[[str], bool]) -> list[tuple[str, str]]:
    """(as written, the absolute path looked at) of each file the command opens at once (files_opened_at_start)
    that does not exist, a relative one taken from `start_dir` (where the job starts)."""
    missing: list[tuple[str, str]] = []
    for path in files_opened_at_start(words):
        looked = os.path.normpath(path if path.startswith("/") else os.path.join(start_dir, path))
        if not exists(looked):
            missing.append((path, looked))
    return missing


def path_words(words: tuple[str, ...]) -> list[tuple[int, str]]:
    """(index, text) of each word that may name a host path: plain words, and the value of `--opt=VALUE`."""
    found = []
    for index, word in enumerate(words):
        if word.startswith("-"):
            name, equals, value = word.partition("=")
            if equals and value and name.startswith("--"):
                found.append((index, value))
            continue
        if word:
            found.append((index, word))
    return found


def check_visibility(program: tuple[str, ...], cwd: str, binds: list[str], flags: tuple[str, ...],
                     environ: Mapping[str, str], host: HostPaths) -> Visibility:
    """The binds the program file needs and the warnings for other paths (see the module's docstring).
    `program` is the command after srun's options; `binds` every bind envrun passes, the working directory first.
    Raises UsageError when the program's directory is / or a system directory."""
    roots = visible_roots(binds, flags, environ)
    result = Visibility()
    reals = _real_roots(roots, host)
    words = path_words(program)
    index = program_file_index(program)
    for at, text in sorted(words, key=lambda item: item[0] != index):  # the program first: its bind counts below
        path = os.path.normpath(os.path.join(cwd, text))
        found = host.found(path)
        if found is None:
            continue
        real, is_dir = found
        if _seen(path, real, roots, reals):
            continue
        if at == index and not is_dir:
            for directory in _program_dirs(path, real, roots, reals, host):
                if system_dir(directory):
                    raise UsageError(
                        f"the program {text} is in {directory}, "
                        + ("the root directory" if directory == "/" else "a system directory") +
                        ", which envrun does not bind into the container (it would hide the image's own files there)",
                        f"copy it to a directory of yours and run the copy (e.g. `cp {path} {cwd}/`); if the image has "
                        f"its own {path}, start it through a shell, whose words envrun does not read: `envrun sh -c 'python {path} ...'`")
                spec = f"{directory}:{directory}:ro"
                result.binds.append(spec)
                roots.append(directory)
                reals |= _real_roots([directory], host)
                result.notes.append(f"--bind {spec}: the program {text} is outside the container's binds, so envrun "
                                    "binds its directory read-only (every task finds it at the same path; writes "
                                    "there fail: write outputs elsewhere)")
            continue
        if system_dir(path) or system_dir(real):
            continue  # the image's own /usr, /etc, ... inside the container
        fix = path if is_dir or os.path.dirname(path) == "/" else os.path.dirname(path)
        shown = path if text == path else f"{text} ({path})"
        result.warnings.append(f"{shown} is not under any bind, so the container will not see it; "
                               f"fix: --bind {fix} (if the image has its own copy, ignore this)")
    return result


def _real_roots(roots: list[str], host: HostPaths) -> set[str]:
    reals = set(roots)
    for root in roots:
        found = host.found(root)
        if found is not None:
            reals.add(found[0])
    return reals


def _seen(path: str, real: str, roots: list[str], reals: set[str]) -> bool:
    """Under a root by its own name, and by its real path (a link under a root may point out of every root)."""
    return any(is_under(path, root) for root in roots) and any(is_under(real, root) for root in reals)


def _program_dirs(path: str, real: str, roots: list[str], reals: set[str], host: HostPaths) -> list[str]:
    """The directories to bind so that the container opens `path`: its own directory when no root shows that
    name (the runtime mounts what a linked directory leads to), and the directory the file's own link leads to
    when that is outside every root too."""
    dirs = []
    if not any(is_under(path, root) for root in roots):
        dirs.append(os.path.dirname(path))
    if not any(is_under(real, root) for root in (*reals, *_real_roots(dirs, host))):
        dirs.append(os.path.dirname(real))
    return dirs
