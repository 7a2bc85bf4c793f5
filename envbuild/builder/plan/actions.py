"""The actions a plan is made of: plain data that a thin executor carries out and a renderer prints.

Every action can describe itself as one line of shell, so `--dry-run` and the golden tests show
exactly what a build will do.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

from envbuild.shared.treecopy import copy_tree_argv


def _quote_all(argv: tuple[str, ...]) -> str:
    return " ".join(shlex.quote(a) for a in argv)


def _check_inside(root: str | None, *paths: str | None) -> None:
    """An action on an image tree names the tree's root and paths under it: the executor resolves the part
    after the root inside the tree (envbuild.imagetree.intree), as if the root were `/`."""
    if root is None:
        return
    for path in paths:
        if path is not None and not path.startswith(root.rstrip("/") + "/"):
            raise ValueError(f"{path} is not under the tree {root} it is to be resolved in")


def inside_of(root: str, path: str) -> str:
    """`path` (under `root`) as a path inside the tree: `/` and what follows the root."""
    return path[len(root.rstrip("/")):]


@dataclass(frozen=True)
class Run:
    """Run a host command. `env` adds to (never replaces) the executor's environment."""

    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()
    cwd: str | None = None

    def describe(self) -> str:
        prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env)
        cwd = f"cd {shlex.quote(self.cwd)} && " if self.cwd else ""
        return cwd + (prefix + " " if prefix else "") + _quote_all(self.argv)


@dataclass(frozen=True)
class WriteFile:
    """Write a file atomically with exactly `mode`. `root`: `path` lies in that image tree and is resolved
    inside it (a link in the base never leads the write out of the tree)."""

    path: str
    content: str
    mode: int = 0o644
    root: str | None = None

    def __post_init__(self) -> None:
        _check_inside(self.root, self.path)

    def describe(self) -> str:
        lines = self.content.count("\n") + (0 if self.content.endswith("\n") else 1)
        return f"write {self.path} (mode {self.mode:04o}, {lines} lines)"


@dataclass(frozen=True)
class MergeJson:
    """Merge keys into a JSON object file (created when missing); later keys win."""

    path: str
    values: tuple[tuple[str, str], ...]
    base: str | None = None  # read from here while `path` does not exist (a user layer over the env layer's file)
    root: str | None = None  # the tree `path` is resolved in (see WriteFile); a file there is read inside it too
    base_root: str | None = None  # the tree `base` is resolved in

    def __post_init__(self) -> None:
        _check_inside(self.root, self.path)
        _check_inside(self.base_root, self.base)

    def describe(self) -> str:
        keys = ", ".join(k for k, _ in self.values)
        return f"merge into {self.path}: {keys}" + (f" (starting from {self.base})" if self.base else "")


@dataclass(frozen=True)
class CopyTree:
    """Copy a directory tree preserving owners, modes, links and xattrs (cp -a). With `hardlink`, files
    are hard links to the source's (cp -al): instant, but only for a copy whose files are never
    rewritten in place (every write the planner makes into it replaces files atomically)."""

    src: str
    dest: str
    hardlink: bool = False
    # Where to record the modification time and size of every regular file under `src` while the copy
    # runs (a GuardTree compares them later): both only read `src`, and side by side they take the
    # copy's time alone (one after the other, the record added a third to the copy of the reference env
    # layer's 46,000 paths).
    snapshot: str | None = None

    def argv(self) -> tuple[str, ...]:
        return copy_tree_argv(self.src, self.dest, linked=self.hardlink)

    def describe(self) -> str:
        copy = " ".join(shlex.quote(a) for a in self.argv())
        if self.snapshot is None:
            return copy
        return f"{copy}  # meanwhile: record file times and sizes of {shlex.quote(self.src)} in {shlex.quote(self.snapshot)}"


@dataclass(frozen=True)
class CopyFile:
    """Copy a file (a directory: cp -a) through a partial name. `ahead`: a copy made early, beside other
    work, for a later step; where the destination's file system has no room it is left undone (that later
    step's own copy reports it, after the step at hand kept its result). `unless_exists`: skipped when
    the destination is there already (made ahead)."""

    src: str
    dest: str
    mode: int | None = None
    ahead: bool = False
    unless_exists: bool = False
    # The image tree `dest` lies in: the copy is made inside it (envbuild.imagetree.intree.copy_into_tree), the
    # source's permission bits kept (or `mode`), never widened.
    dest_root: str | None = None
    # An image copied to the output: the files[] sources it holds (host paths), each with the readers (GROUP,
    # OTHERS of envbuild.envspec.specmodel) its entry leaves to the source's bits. Whoever of them cannot read a source
    # on this host gets no permission on the copy, from its creation on (anyone who can read an image can read
    # every file in it).
    private_sources: tuple[tuple[str, int], ...] = ()

    def __post_init__(self) -> None:
        _check_inside(self.dest_root, self.dest)

    def describe(self) -> str:
        mode = f" (mode {self.mode:04o})" if self.mode is not None else ""
        when = ("  # ahead, for the output step; left to it when there is no room" if self.ahead else
                "  # unless made ahead already" if self.unless_exists else "")
        private = "  # without permissions for those who cannot read its files[] sources" if self.private_sources else ""
        return f"copy {shlex.quote(self.src)} -> {shlex.quote(self.dest)}{mode}{when}{private}"


@dataclass(frozen=True)
class MakeDirs:
    """Create directories with their parents. `mode`: the exact permission bits of every directory this
    creates (those that exist are left alone); None: the umask's. Directories that end up in an image get
    0o755, so that what the builder's umask hides (0007) does not hide the image's files from its users."""

    paths: tuple[str, ...]
    mode: int | None = None
    root: str | None = None  # the image tree the paths lie in (see WriteFile)

    def __post_init__(self) -> None:
        _check_inside(self.root, *self.paths)

    def describe(self) -> str:
        mode = f"-m {self.mode:04o} " if self.mode is not None else ""
        return f"mkdir -p {mode}" + _quote_all(self.paths)


@dataclass(frozen=True)
class Touch:
    """Create empty files (mount points for single-file binds)."""

    paths: tuple[str, ...]
    root: str | None = None  # the image tree the paths lie in (see WriteFile)

    def __post_init__(self) -> None:
        _check_inside(self.root, *self.paths)

    def describe(self) -> str:
        return "touch " + _quote_all(self.paths)


@dataclass(frozen=True)
class Remove:
    paths: tuple[str, ...]
    root: str | None = None  # the image tree the paths lie in: each entry itself is removed, resolved inside it

    def __post_init__(self) -> None:
        _check_inside(self.root, *self.paths)

    def describe(self) -> str:
        return "rm -rf " + _quote_all(self.paths)


@dataclass(frozen=True)
class Rename:
    """Atomic rename: a result appears only once complete."""

    src: str
    dest: str
    src_root: str | None = None  # the image tree `src` lies in (a file a build step left there), resolved inside it

    def __post_init__(self) -> None:
        _check_inside(self.src_root, self.src)

    def describe(self) -> str:
        return f"mv -T {shlex.quote(self.src)} {shlex.quote(self.dest)}"


@dataclass(frozen=True)
class WriteRunWrappers:
    """Write `dest/<command>` wrapper scripts for the executables found in `venv_bin` (known only once
    the packages are installed; None where the packages went into the base's own Python, which has no venv:
    `extra_commands` only), each exec'ing into `image` like envrun does on system `system`."""

    venv_bin: str | None
    dest: str
    image: str
    system: str  # a recipe's name, or its file's absolute path (envbuild.recipes.ops.system_argument)
    runtime_name: str
    overlays: tuple[tuple[str, str], ...] = ()  # (NAME.sqsh, mount point), mounted over `image`
    extra_commands: tuple[str, ...] = ()  # wrapped too although not in venv_bin (an overlay's base's torchrun)
    venv_root: str | None = None  # the tree `venv_bin` lies in: its entries are resolved inside it

    def __post_init__(self) -> None:
        _check_inside(self.venv_root, self.venv_bin)

    def describe(self) -> str:
        over = "".join(f" with overlay {path} at {mount}" for path, mount in self.overlays)
        if self.venv_bin is None:
            return (f"write run wrappers for {' '.join(self.extra_commands)} (the base's own Python, first on its PATH "
                    f"in the image) to {self.dest}/ (system {self.system}{over})")
        return f"write run wrappers for the commands in {self.venv_bin} to {self.dest}/ (system {self.system}{over})"


@dataclass(frozen=True)
class RecordDigest:
    """Write the content digest ("sha256:...") of a file or a whole tree (envbuild.shared.treedigest) to `dest`. A tree
    may also keep its per-file digests (`files_out`) and reuse another tree's (`reuse`) for the files it
    shares with it by hard links."""

    path: str
    dest: str
    files_out: str | None = None
    reuse: str | None = None

    def describe(self) -> str:
        text = f"record the sha256 of {shlex.quote(self.path)} in {shlex.quote(self.dest)}"
        if self.files_out:
            text += f", each file's in {shlex.quote(self.files_out)}"
        if self.reuse:
            text += f" (reusing {shlex.quote(self.reuse)} for the files shared with it)"
        return text


@dataclass(frozen=True)
class ClampTimes:
    """Set every time in a tree later than `epoch` to `epoch` (SOURCE_DATE_EPOCH clamping): files the
    build made get one fixed time, files from the base keep theirs, so timestamp-based .pyc files of
    the base stay valid."""

    path: str
    epoch: int

    def describe(self) -> str:
        return f"clamp the times in {shlex.quote(self.path)} to at most {self.epoch}"


@dataclass(frozen=True)
class GuardTree:
    """Compare `path` with its snapshot. A file changed there was written through a hard link by the
    step: the tree (a store layer) is no longer what its key says, so its `invalidate` marker is
    removed (the layer is rebuilt when next needed) and a warning printed. The step's own result,
    which has the new content, stays valid, so the check runs in the background while the build goes on
    (envbuild.builder.execute.fsactions.guard_tree); the snapshot is removed after it."""

    path: str
    snapshot: str
    invalidate: str

    def describe(self) -> str:
        return (f"check that nothing in {shlex.quote(self.path)} was written through a hard link "
                f"(else remove {shlex.quote(self.invalidate)}), in the background; then rm {shlex.quote(self.snapshot)}")


@dataclass(frozen=True)
class CheckReachable:
    """Fail fast, naming what cannot be reached, when a network source a build needs does not answer
    within `timeout_s` (any HTTP answer counts as reachable; a refused, unresolved or silent host does not)."""

    checks: tuple[tuple[str, str], ...]  # (URL, what it is for)
    timeout_s: float = 5.0
    fix: str = ""  # how to proceed when some cannot be reached

    def describe(self) -> str:
        return "check reachable within {:g} s: {}".format(self.timeout_s, " ".join(url for url, _ in self.checks))


@dataclass(frozen=True)
class CheckTorchFamily:
    """Stop when torchvision/torchaudio in the environment at `prefix` of the tree `root` were built for
    another variant than torch (envbuild.envspec.torchfamily). Read from the files, nothing imported or run.
    `given`: name==version of members the environment gets from elsewhere (an overlay's base), used for
    those not installed under `root`. `where` names the environment in the message. `sys_path_file`: a file of
    the tree (a path inside it) that lists, one a line, the directories the environment imports from, in order,
    where `prefix` cannot tell them (the base's own Python, whose sys.path is known only inside the container)."""

    root: str
    prefix: str
    where: str
    given: tuple[str, ...] = ()
    sys_path_file: str | None = None

    def describe(self) -> str:
        base = f" (with the base's {' '.join(self.given)})" if self.given else ""
        python = f" of the Python whose sys.path is listed in {self.sys_path_file}" if self.sys_path_file else ""
        return f"check that the torch family in {shlex.quote(self.root)}{python} follows torch's variant{base}"


@dataclass(frozen=True)
class CheckLinksInside:
    """Stop, naming the link, when one of `paths` of the tree `root` is, or lies under, a symbolic link that the
    host resolves to somewhere outside the tree: for trees a tool other than envbuild writes into by host paths
    (apptainer build writes the runtime's files under /.singularity.d and at /environment, /.exec, ... and
    follows such a link, onto the host). `what` names the tree in the message."""

    root: str
    paths: tuple[str, ...]
    what: str

    def describe(self) -> str:
        return (f"check that {shlex.quote(self.root)} has no link out of it at "
                f"{' '.join(self.paths[:3])}{' ...' if len(self.paths) > 3 else ''} ({len(self.paths)} paths)")


@dataclass(frozen=True)
class StartBeside:
    """Start `runs` (commands that only read, side by side, up to one per CPU, at most 4) in the
    background while the step's next actions run (envbuild.builder.execute.beside). A JoinBeside later in the step
    waits for them; one that fails stops the others and the step, and a step that fails or is interrupted
    stops them."""

    name: str
    title: str
    runs: tuple[Run, ...]

    def describe(self) -> str:
        return f"{' '.join(f'( {run.describe()} ) &' for run in self.runs)}  # {self.name}: {self.title}, in the background"


@dataclass(frozen=True)
class JoinBeside:
    """Wait for the StartBeside of the same step; fail the step with the output of a command that failed."""

    name: str

    def describe(self) -> str:
        return f"wait  # for {self.name}: stop here if it failed"


Action = (CheckReachable | CheckTorchFamily | CheckLinksInside | GuardTree | ClampTimes | WriteRunWrappers | Run | WriteFile
          | MergeJson | CopyTree | CopyFile | MakeDirs | Touch | Remove | Rename | RecordDigest | StartBeside | JoinBeside)


@dataclass(frozen=True)
class Step:
    """A named group of actions shown as one line of progress.

    `skip_if_exists`: the step is done already when this path exists (a cache entry's completion
    marker); the executor then skips it. `cleanup`: actions run if the step fails, so a failed step
    leaves no half-made result behind. `lock`: (kind, entry name) of the store entry the step fills;
    the executor holds that entry's lock while it checks `skip_if_exists` and runs the step, so
    concurrent builds of the same layer wait for one another instead of both building it.
    """

    name: str
    title: str
    actions: tuple[Action, ...]
    skip_if_exists: str | None = None
    cleanup: tuple[Action, ...] = field(default=())
    lock: tuple[str, str] | None = None
