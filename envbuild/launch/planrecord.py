"""Records what planning a launch reads, and stores the plan with those facts (envbuild.launch.plancache says
what a fact is and how a later launch checks it).

While a PlanRecorder is active, the functions through which envrun's launch path reads the host are wrapped:
os's stat, lstat, open, access, listdir, readlink, sched_getaffinity, cpu_count and uname, open (builtins' and io's), pwd's
and grp's lookups, and os.environ (a snapshot that records each variable read, and the set of names when it
is iterated). Each call is passed through unchanged and its first answer kept as a fact. The functions this
cannot answer for again (scandir, a path relative to a descriptor it did not see opened, a write outside
the user's cache), a program started (an audit event: scontrol, a runtime's `--version`) and anything written
to stderr while planning (a file ignored with a warning) make the plan one that is not stored.

The user's own cache (envbuild.host.usercache) is read and written while planning; its files are no facts:
each holds what its key (recorded inputs: a recipe's bytes, an image's stat) determines, so a plan does not
depend on whether they were there. tests/test_architecture.py checks that every os call of the modules a
plain launch loads is recorded here or named in NO_FACT.

Loaded on a miss only (a launch that plans), never on the cached path.
"""

from __future__ import annotations

import builtins
import grp
import io
import os
import pwd
import sys

from envbuild.launch.plancache import PSEUDO_FILE_ROOTS, account_entry, plan_key, signature, slot_name

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping, MutableMapping, Sequence
    from typing import Any

    from envbuild.launch.launchrequest import LaunchPlan
else:
    from _collections_abc import Mapping  # what os has imported: collections.abc would import collections

# os's functions wrapped while planning (each answer a fact), and builtins.open with them.
RECORDED_OS_CALLS = frozenset({"stat", "lstat", "open", "access", "listdir", "readlink", "scandir",
                               "sched_getaffinity", "cpu_count", "uname"})
# os's calls on the launch path that read nothing a plan depends on beyond the facts and the key.
NO_FACT = {
    "close": "ends a descriptor whose open is a fact",
    "read": "reads a descriptor whose open is a fact",
    "fstat": "of a descriptor whose open is a fact (its path's stat is the fact)",
    "getcwd": "the working directory is in the key",
    "geteuid": "the user is in the key",
    "write": "the user cache's own files",
    "fchmod": "the user cache's own files",
    "execvpe": "the exec, after planning",
    "path.abspath": "string work on the working directory, which is in the key",
    "path.realpath": "lstat and readlink, which are recorded",
    "path.exists": "stat, which is recorded",
    "path.isdir": "stat, which is recorded",
    "path.isfile": "stat, which is recorded",
    "path.lexists": "lstat, which is recorded",
    "path.islink": "lstat, which is recorded",
}
_WRITES = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
# Audit events of what a plan cannot be checked against again: a program's output, the network, a library.
_UNREPEATABLE_EVENTS = frozenset({
    "subprocess.Popen", "os.system", "os.posix_spawn", "os.fork", "os.forkpty", "os.exec", "os.spawn",
    "pty.spawn", "socket.connect", "socket.getaddrinfo", "socket.gethostname", "socket.gethostbyname",
    "ctypes.dlopen",
})
_OPEN = builtins.open  # io.open is the same function
_ASKED_FIRST = {"env": 0, "names": 1, "affinity": 2, "cpu_count": 3, "uname": 4}
_ACTIVE: list[PlanRecorder] = []
_AUDITING: list[bool] = []


class PlanRecorder:
    """Records the facts a plan is made from (a context manager around the planning), then stores the plan."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        from envbuild.host.usercache import user_cache_dir

        self.facts: dict[tuple[Any, ...], Any] = {}
        self.spoiled = ""  # why the plan must not be stored ("" while it may)
        self.environ = RecordingEnviron(dict(environ), self, os.environ)
        self._cache_dir = user_cache_dir(environ)
        self._descriptors: dict[int, str] = {}  # descriptors opened while recording -> their paths
        self._busy = False  # inside a wrapper: what it calls itself is not recorded
        self._restore: list[tuple[Any, str, Any]] = []
        self._originals: dict[str, Callable[..., Any]] = {}  # os's wrapped functions, by name

    def saw(self, question: tuple[Any, ...], answer: Any) -> None:
        self.facts.setdefault(question, answer)

    def spoil(self, why: str) -> None:
        self.spoiled = self.spoiled or why

    def __enter__(self) -> PlanRecorder:
        if not _AUDITING:
            sys.addaudithook(_on_audit_event)  # for good (hooks cannot be removed): it acts while one records
            _AUDITING.append(True)
        wrappers: list[tuple[Any, str, Any]] = [
            (os, "stat", self._stat), (os, "lstat", self._lstat), (os, "open", self._open), (os, "close", self._close),
            (os, "access", self._access), (os, "listdir", self._listdir), (os, "scandir", self._scandir),
            (os, "readlink", self._readlink), (os, "sched_getaffinity", self._affinity),
            (os, "cpu_count", self._cpu_count), (os, "uname", self._uname),
            (builtins, "open", self._builtin_open), (io, "open", self._builtin_open),  # pathlib opens with io.open
            (pwd, "getpwuid", self._account(pwd.getpwuid)), (pwd, "getpwnam", self._account(pwd.getpwnam)),
            (grp, "getgrgid", self._account(grp.getgrgid)), (grp, "getgrnam", self._account(grp.getgrnam)),
            (os, "environ", self.environ), (sys, "stderr", _WatchedStream(sys.stderr, self)),
        ]
        for owner, name, wrapper in wrappers:
            if hasattr(owner, name):
                self._restore.append((owner, name, getattr(owner, name)))
                if owner is os:
                    self._originals[name] = getattr(owner, name)
                setattr(owner, name, wrapper)
        _ACTIVE.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        _ACTIVE.remove(self)
        for owner, name, original in reversed(self._restore):
            setattr(owner, name, original)
        self._restore.clear()
        self._originals.clear()

    def _real(self, name: str) -> Callable[..., Any]:
        """os's function `name` as it was before this recorder wrapped it."""
        original: Callable[..., Any] = self._originals.get(name) or getattr(os, name)
        return original

    # --- what a path argument names -------------------------------------------------------------------------
    def _path(self, path: Any, dir_fd: int | None = None) -> str | None:
        """The path a call reads (joined to its directory descriptor's), None for a descriptor. A path it
        cannot name again (bytes, a directory descriptor it did not see opened) spoils the plan."""
        if isinstance(path, int):
            return None
        named = os.fspath(path)
        if not isinstance(named, str):
            self.spoil("a path given as bytes")
            return None
        if dir_fd is None:
            return named
        base = self._descriptors.get(dir_fd)
        if base is None:
            self.spoil(f"{named} read relative to a directory opened before planning")
            return None
        return os.path.join(base, named)

    def _ours(self, path: str) -> bool:
        """A file in the user's own cache: no fact (the module's docstring). The directory itself is one."""
        return path.startswith(self._cache_dir + "/")

    def _saw_read(self, path: str, follow: bool) -> None:
        """A file opened for reading: its stat (its content for a kernel pseudo file) is the fact."""
        if path.startswith(PSEUDO_FILE_ROOTS):
            from envbuild.launch.plancache import content_crc

            if ("content", path) not in self.facts:
                self._busy = True  # content_crc's own open and reads are no facts
                try:
                    self.saw(("content", path), content_crc(path))
                finally:
                    self._busy = False
            return
        question = ("stat" if follow else "lstat", path)
        if question not in self.facts:
            try:
                self.saw(question, signature(self._real("stat")(path, follow_symlinks=follow)))
            except OSError as exc:
                self.saw(question, exc.errno)

    # --- the wrappers ---------------------------------------------------------------------------------------
    def _passed(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        self._busy = True
        try:
            return self._real(name)(*args, **kwargs)
        finally:
            self._busy = False

    def _stat_like(self, name: str, follow: bool, path: Any, dir_fd: int | None, args: tuple[Any, ...],
                   kwargs: dict[str, Any]) -> Any:
        where = None if self._busy else self._path(path, dir_fd)
        question = ("stat" if follow else "lstat", where)
        try:
            result = self._passed(name, args, kwargs)
        except OSError as exc:
            if where is not None and not self._ours(where):
                self.saw(question, exc.errno)
            raise
        if where is not None and not self._ours(where):
            self.saw(question, signature(result))
        return result

    def _stat(self, path: Any, *args: Any, dir_fd: int | None = None, follow_symlinks: bool = True) -> Any:
        return self._stat_like("stat", follow_symlinks, path, dir_fd, (path, *args),
                               {"dir_fd": dir_fd, "follow_symlinks": follow_symlinks})

    def _lstat(self, path: Any, *args: Any, dir_fd: int | None = None) -> Any:
        return self._stat_like("lstat", False, path, dir_fd, (path, *args), {"dir_fd": dir_fd})

    def _open(self, path: Any, flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
        where = None if self._busy else self._path(path, dir_fd)
        if where is not None and not self._ours(where):
            if flags & _WRITES:
                self.spoil(f"{where} opened for writing while planning")
            else:
                self._saw_read(where, follow=not flags & getattr(os, "O_NOFOLLOW", 0))
        descriptor: int = self._passed("open", (path, flags, mode), {"dir_fd": dir_fd})
        if where is not None:
            self._descriptors[descriptor] = where
        return descriptor

    def _close(self, descriptor: int) -> None:
        self._descriptors.pop(descriptor, None)
        self._passed("close", (descriptor,), {})

    def _access(self, path: Any, mode: int, *args: Any, **kwargs: Any) -> bool:
        where = None if self._busy else self._path(path, kwargs.get("dir_fd"))
        if args or any(kwargs.get(name) for name in ("effective_ids", "dir_fd")) or kwargs.get("follow_symlinks") is False:
            self.spoil("os.access with options")
        result: bool = self._passed("access", (path, mode, *args), kwargs)
        if where is not None and not self._ours(where):
            self.saw(("access", where, mode), result)
        return result

    def _listdir(self, path: Any = None) -> list[str]:
        where = None if self._busy else self._path("." if path is None else path)
        if where is None and not self._busy:
            self.spoil("a directory listed through a descriptor")
        try:
            names: list[str] = self._passed("listdir", (path,) if path is not None else (), {})
        except OSError as exc:
            if where is not None and not self._ours(where):
                self.saw(("listdir", where), exc.errno)
            raise
        if where is not None and not self._ours(where):
            self.saw(("listdir", where), tuple(sorted(names)))
        return names

    def _scandir(self, *args: Any) -> Any:
        if not self._busy:
            self.spoil("os.scandir while planning (its entries' types are not recorded)")
        return self._passed("scandir", args, {})

    def _readlink(self, path: Any, *, dir_fd: int | None = None) -> Any:
        where = None if self._busy else self._path(path, dir_fd)
        if where is not None and where.startswith("/proc/self/fd/"):  # where an open descriptor leads
            opened = self._descriptors.get(int(where.rsplit("/", 1)[1])) if where.rsplit("/", 1)[1].isdigit() else None
            if opened is None:
                self.spoil(f"{where} of a descriptor opened before planning")
            else:
                self._busy = True
                try:
                    self.saw(("realpath", opened), os.path.realpath(opened))
                finally:
                    self._busy = False
            where = None
        try:
            result = self._passed("readlink", (path,), {"dir_fd": dir_fd})
        except OSError as exc:
            if where is not None and not self._ours(where):
                self.saw(("readlink", where), exc.errno)
            raise
        if where is not None and not self._ours(where):
            self.saw(("readlink", where), result)
        return result

    def _affinity(self, pid: int) -> set[int]:
        if pid != 0:
            self.spoil("the CPU affinity of another process")
        cpus: set[int] = self._passed("sched_getaffinity", (pid,), {})
        self.saw(("affinity",), tuple(sorted(cpus)))
        return cpus

    def _cpu_count(self) -> int | None:
        count: int | None = self._passed("cpu_count", (), {})
        self.saw(("cpu_count",), count)
        return count

    def _uname(self) -> Any:
        result = self._passed("uname", (), {})
        self.saw(("uname",), tuple(result))
        return result

    def _builtin_open(self, file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        where = None if self._busy else self._path(file)
        if where is not None and not self._ours(where):
            if any(letter in mode for letter in "wax+"):
                self.spoil(f"{where} opened for writing while planning")
            else:
                self._saw_read(where, follow=True)
        self._busy = True
        try:
            return _OPEN(file, mode, *args, **kwargs)
        finally:
            self._busy = False

    def _account(self, lookup: Callable[[Any], Any]) -> Callable[[Any], Any]:
        def recorded(key: Any) -> Any:
            try:
                entry = lookup(key)
            except KeyError:
                self.saw((lookup.__name__, key), None)
                raise
            self.saw((lookup.__name__, key), account_entry(entry))
            return entry

        return recorded

    # --- storing ----------------------------------------------------------------------------------------------
    def store(self, argv: Sequence[str], cwd: str, plan: LaunchPlan) -> None:
        """Keep `plan` for `argv` in `cwd` with its facts, and the stat of each envbuild module this process
        loaded (its code made the plan). Not when the plan runs an srun step, nor when something made it
        unrepeatable (`spoiled`)."""
        if self.spoiled or plan.step:
            return
        # the questions a changed environment fails soonest first: a miss then costs the least
        facts = sorted(((*question, answer) for question, answer in self.facts.items()),
                       key=lambda fact: _ASKED_FIRST.get(fact[0], len(_ASKED_FIRST)))
        for name, module in list(sys.modules.items()):
            source = getattr(module, "__file__", None) if name == "envbuild" or name.startswith("envbuild.") else None
            if source:
                try:
                    facts.append(("stat", source, signature(os.stat(source))))
                except OSError:
                    return
        from envbuild.host.usercache import write_cached
        from envbuild.launch.repeatplan import launcher_facts, write_repeat_plan

        facts.extend(launcher_facts())  # an edited bin/envrun or a replaced Python: both plans miss alike
        key = plan_key(argv, cwd)
        write_cached(slot_name(key), key, {
            "facts": facts, "argv": list(plan.argv), "env": [list(pair) for pair in plan.env],
            "unset": list(plan.unset), "warnings": list(plan.warnings),
        })
        write_repeat_plan(argv, cwd, facts, plan.argv, plan.env, plan.unset, plan.warnings)


class RecordingEnviron(Mapping[str, str]):
    """A snapshot of the environment that records each variable read (its value, or None where it is unset),
    and the names of all of them where it is iterated. Setting a variable sets it in os.environ too, and
    spoils the plan (the environment changed while planning)."""

    def __init__(self, variables: dict[str, str], recorder: PlanRecorder, real: MutableMapping[str, str]) -> None:
        self._variables = variables
        self._recorder = recorder
        self._real = real  # os.environ itself, which a variable set while planning is set in too

    def __getitem__(self, name: str) -> str:
        value = self._variables.get(name)
        self._recorder.saw(("env", name), value)
        if value is None:
            raise KeyError(name)
        return value

    def get(self, name: str, default: Any = None) -> Any:
        value = self._variables.get(name)
        self._recorder.saw(("env", name), value)
        return default if value is None else value

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.get(name) is not None

    def __iter__(self) -> Iterator[str]:
        self._recorder.saw(("names",), tuple(sorted(self._variables)))
        return iter(list(self._variables))

    def __len__(self) -> int:
        self._recorder.saw(("names",), tuple(sorted(self._variables)))
        return len(self._variables)

    def copy(self) -> dict[str, str]:
        return dict(self)

    def __setitem__(self, name: str, value: str) -> None:
        self._recorder.spoil(f"${name} set while planning")
        self._variables[name] = value
        self._real[name] = value

    def __delitem__(self, name: str) -> None:
        self._recorder.spoil(f"${name} unset while planning")
        del self._variables[name]
        self._real.pop(name, None)

    def pop(self, name: str, *default: Any) -> Any:
        self._recorder.spoil(f"${name} unset while planning")
        self._real.pop(name, None)
        return self._variables.pop(name, *default)

    def setdefault(self, name: str, value: str) -> str:
        if name not in self:
            self[name] = value
        return self._variables[name]


class _WatchedStream:
    """sys.stderr while planning: what is written goes through, and marks the plan as one not to store (a
    warning printed while planning, a file ignored, would not be printed by a launch from the cache)."""

    def __init__(self, stream: Any, recorder: PlanRecorder) -> None:
        self._stream = stream
        self._recorder = recorder

    def write(self, text: str) -> int:
        if text:
            self._recorder.spoil("printed on stderr while planning")
        written: int = self._stream.write(text)
        return written

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _on_audit_event(event: str, args: tuple[Any, ...]) -> None:
    if _ACTIVE and event in _UNREPEATABLE_EVENTS:
        _ACTIVE[-1].spoil(f"{event} while planning")
