"""A launch's plan kept per user: a repeat of the same envrun command line in the same directory reads one
small file and execs.

Planning a launch reads files (the walk up for envrun.yaml and its trust facts, the user's config, the recipes
and their caches, the image's header and runscript, PATH), variables and host facts (affinity, GPUs listed in
/proc and /sys). When envrun plans a plain launch (one it execs: no srun step, no --dry-run or --explain),
envbuild.launch.planrecord records every one of those reads as a *fact*: what was asked and what the answer was.
The plan (the argv, the variables set and unset, the warnings) is stored with its facts under a key of the
command line, the working directory, the user, the Python and the envbuild that made it. The next launch with
that key asks each question again and execs the stored plan only when every answer is the same; any change
(a variable it read, a file's owner, mode, size, inode or times, a directory listing, the CPU affinity, a
source file of envbuild) is a miss, and the plan is made again by the full path. A trust decision is never
skipped: the owner, group and mode of every directory walked and every file judged are facts, so a file
made another's or writable by others misses and is judged again; a plan whose making printed a warning
(a file ignored) or ran a program (scontrol, `--version`) is not stored at all.

Plans are kept outside Slurm jobs only (plans_kept), and not where $ENVRUN_PLAN_CACHE is off: there every
launch plans, as before. What is asked
again per fact is cheap (a stat, an access check, a listing, one variable), so a hit costs
Python's start, this module and usercache, and a few dozen system calls. The file lives in the user's own
cache (envbuild.host.usercache: 0700 directory, 0600 files, owner and mode checked on every read, plain
data only), in one of PLAN_SLOTS slots chosen by the key, so the cache holds at most that many plans.

Light on purpose: os, sys, zlib and marshal (through usercache) only; pwd, grp and the facts' other modules
only where a stored fact needs them.
"""

from __future__ import annotations

import os
import sys
import zlib

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import Any

# Bump when what a plan entry holds or what a fact means changes.
PLAN_FORMAT = 2
PLAN_SLOTS = 256  # at most this many plan files per user: a key's slot is its crc32 modulo this
_DIRECTORY = 0o040000
_FILE_TYPE = 0o170000
# Files whose stat says nothing of their content (kernel pseudo files): their content's crc32 is the fact.
PSEUDO_FILE_ROOTS = ("/proc/", "/sys/")


def plan_key(argv: Sequence[str], cwd: str) -> str:
    """What a stored plan is for: this command line in this directory, by this user, made by this Python and
    this envbuild (its location; its source files' stats are facts of their own)."""
    import envbuild

    head = (str(PLAN_FORMAT), envbuild.__file__ or "", sys.version, sys.executable, sys.argv[0] if sys.argv else "",
            str(os.geteuid()), cwd)
    return "\0".join((*head, *argv))


def slot_name(key: str) -> str:
    return f"plan-{zlib.crc32(key.encode('utf-8', 'surrogateescape')) % PLAN_SLOTS:02x}.marshal"


class CachedPlan:
    """What a stored plan execs: argv, the variables it sets and unsets, and the warnings it prints first."""

    __slots__ = ("argv", "env", "unset", "warnings")

    def __init__(self, argv: list[str], env: list[list[str]], unset: list[str], warnings: list[str]) -> None:
        self.argv = argv
        self.env = env
        self.unset = unset
        self.warnings = warnings


# ENVRUN_PLAN_CACHE=off (or 0, no, false): plan every launch, keep nothing.
SWITCH = "ENVRUN_PLAN_CACHE"
SWITCHED_OFF = ("0", "off", "no", "false")


def plans_kept(environ: Mapping[str, str]) -> bool:
    """Whether plans are kept and looked up here: outside a Slurm job, unless $ENVRUN_PLAN_CACHE turns it off.
    A job's variables differ from job to job and from task to task, so its plans would not be used again,
    and every task of `srun envrun ...` would write one into a home directory that is often on the cluster's
    shared file system."""
    if environ.get("SLURM_JOB_ID") or environ.get("SLURM_JOBID"):
        return False
    return environ.get(SWITCH, "").lower() not in SWITCHED_OFF


def exec_cached(argv: Sequence[str]) -> None:
    """Exec the plan kept for this very command line in this directory when every fact it was made from still
    holds; return, having done nothing, otherwise (envrun then plans: envbuild.commands.launch). Asked once per
    process: envrun's entry scripts ask before envbuild.cli.envrun_main loads, and its main() asks again only
    where it was started otherwise (`python -m envbuild.cli.envrun_main`, tests)."""
    if _ASKED:
        return
    _ASKED.append(True)
    restore_coerced_locale()
    if not plans_kept(os.environ):
        return
    try:
        cwd = os.getcwd()
    except OSError:
        return
    plan = cached_plan(argv, os.environ, cwd)
    if plan is None:
        return
    sys.stderr.write("".join(f"envrun: warning: {warning}\n" for warning in plan.warnings))
    env = environment_for(plan.unset, plan.env)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvpe(plan.argv[0], plan.argv, env)  # noqa: S606 - argv passed as words, deliberately no shell
    except OSError:
        return  # planned afresh, which says what is wrong


_ASKED: list[bool] = []


# What CPython's locale coercion (PEP 538) sets LC_CTYPE to: Python/pylifecycle.c, _TARGET_LOCALES.
COERCED_LOCALES = ("C.UTF-8", "C.utf8", "UTF-8")


def restore_coerced_locale(started_with: str = "/proc/self/environ") -> None:
    """Put LC_CTYPE back to the value this process was started with where Python changed it. Where the locale
    is C or POSIX, Python sets LC_CTYPE in its own environment before any code runs, so every program envrun
    starts (apptainer, the program in the container, srun's tasks) would get an LC_CTYPE the user never set,
    and a first launch would differ from a repeat launch that a checkout's C program (repeatlaunch.c) execs
    without Python. The kernel keeps the environment a process was started with in /proc/self/environ; it is
    read only where LC_CTYPE holds a value coercion sets."""
    if os.environ.get("LC_CTYPE") not in COERCED_LOCALES:
        return
    try:
        with open(started_with, "rb") as handle:
            entries = handle.read().split(b"\0")
    except OSError:
        return  # nothing to go by: nothing is changed
    for entry in entries:
        if entry.startswith(b"LC_CTYPE="):
            os.environ["LC_CTYPE"] = os.fsdecode(entry[len(b"LC_CTYPE="):])
            return
    del os.environ["LC_CTYPE"]


def environment_for(unset: Sequence[str], settings: Sequence[Sequence[str]]) -> dict[str, str]:
    """This process's environment less `unset`, with `settings` ((name, value) pairs) set: the program's."""
    env = dict(os.environ)
    for name in unset:
        env.pop(name, None)
    env.update((name, value) for name, value in settings)
    return env


def cached_plan(argv: Sequence[str], environ: Mapping[str, str], cwd: str) -> CachedPlan | None:
    """The plan stored for `argv` in `cwd` when every fact it was made from still holds; None otherwise."""
    from envbuild.host.usercache import MISS, read_cached

    key = plan_key(argv, cwd)
    entry = read_cached(slot_name(key), key, is_entry)
    if entry is MISS or not facts_hold(entry["facts"], environ):
        return None
    return CachedPlan(entry["argv"], entry["env"], entry["unset"], entry["warnings"])


def is_entry(value: Any) -> bool:
    """The shape of a stored plan (usercache has checked that it is plain data)."""
    return (type(value) is dict and type(value.get("facts")) is list and _texts(value.get("argv"))
            and bool(value["argv"]) and _texts(value.get("unset")) and _texts(value.get("warnings"))
            and type(value.get("env")) is list
            and all((type(pair) is list or type(pair) is tuple) and len(pair) == 2 and _texts(pair)
                    for pair in value["env"]))


def _texts(value: Any) -> bool:
    return (type(value) is list or type(value) is tuple) and all(type(item) is str for item in value)


def facts_hold(facts: Sequence[Any], environ: Mapping[str, str]) -> bool:
    """Whether asking each fact's question again gives its recorded answer."""
    try:
        for fact in facts:
            if type(fact) is not tuple or len(fact) < 2 or observe(fact[:-1], environ) != fact[-1]:
                return False
    except (OSError, TypeError, ValueError, KeyError, IndexError):  # a question that cannot be asked here: a miss
        return False
    return True


def observe(question: tuple[Any, ...], environ: Mapping[str, str]) -> Any:
    """The answer to one fact's question now, in the form envbuild.launch.planrecord records it."""
    kind = question[0]
    if kind == "env":
        return environ.get(question[1])
    if kind == "stat" or kind == "lstat":
        try:
            return signature(os.stat(question[1], follow_symlinks=kind == "stat"))
        except OSError as exc:
            return exc.errno
    if kind == "access":
        return os.access(question[1], question[2])
    if kind == "listdir":
        try:
            return tuple(sorted(os.listdir(question[1])))
        except OSError as exc:
            return exc.errno
    if kind == "readlink":
        try:
            return os.readlink(question[1])
        except OSError as exc:
            return exc.errno
    if kind == "realpath":
        return os.path.realpath(question[1])
    if kind == "content":
        return content_crc(question[1])
    if kind == "names":
        return tuple(sorted(environ))
    if kind == "affinity":
        return tuple(sorted(os.sched_getaffinity(0)))
    if kind == "cpu_count":
        return os.cpu_count()
    if kind == "uname":
        return tuple(os.uname())
    if kind in ("getpwuid", "getpwnam", "getgrgid", "getgrnam"):
        return account(kind, question[1])
    raise ValueError(kind)  # a fact of a kind this envrun does not know: a miss


def signature(status: os.stat_result) -> tuple[int, ...]:
    """What a stat says that a plan may depend on. For a file: its type and mode, owner, group, device, inode,
    size and times (an edited or replaced file differs). For a directory the times and size are left out:
    they change with every entry made or removed in it, and what the plan took from its entries (a listing,
    a file looked up in it) is a fact of its own."""
    head = (status.st_mode, status.st_uid, status.st_gid, status.st_dev, status.st_ino)
    if status.st_mode & _FILE_TYPE == _DIRECTORY:
        return head
    return (*head, status.st_size, status.st_mtime_ns, status.st_ctime_ns)


def content_crc(path: str) -> int | tuple[int, int]:
    """(crc32, length) of a pseudo file's content, or the errno that reading it failed with."""
    try:
        handle = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as exc:
        return exc.errno or -1
    try:
        data = b""
        while chunk := os.read(handle, 1 << 16):
            data += chunk
    except OSError as exc:
        return exc.errno or -1
    finally:
        os.close(handle)
    return zlib.crc32(data), len(data)


def account(kind: str, key: int | str) -> tuple[Any, ...] | None:
    """pwd's or grp's entry (`kind` is the function's name) as record_account makes it, None where there is none."""
    import grp
    import pwd

    try:
        entry = getattr(pwd if kind.startswith("getpw") else grp, kind)(key)
    except (KeyError, TypeError, OverflowError):
        return None
    return account_entry(entry)


def account_entry(entry: Sequence[Any]) -> tuple[Any, ...]:
    """A pwd or grp entry as plain data: its fields, a group's members as a tuple."""
    return tuple(tuple(field) if type(field) is list else field for field in entry)
