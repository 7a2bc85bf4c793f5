"""Which files envrun takes from the file system without being told (the nearest envrun.yaml, the one *.sif
in the working directory) it may obey, on a machine shared with other users.

Such a file chooses the image, binds and variables of the user's run, so one planted by someone else is
someone else running code as the user. git's rule for repositories after CVE-2022-24765 is the model:

- the walk up from the working directory stops at a file system boundary (a project does not span
  mounts; / and a scratch root are other file systems than the project) and at the first directory that
  is not the user's and that others may write (a sticky /tmp or scratch root): nothing above such a
  directory is the user's project, and anyone may put an envrun.yaml there;
- a file found is obeyed only when it belongs to the user or root, nobody else may write it, and its
  directory is the user's own or one nobody else may write;
- a file that fails this is ignored with one line on stderr naming it, its owner and the fix, and the
  walk ends there (the nearest file was meant; a farther one would change meaning silently).

"Others may write" counts the group too, except the user's own private group (a group of the user's name
with no other members: Debian's and RHEL's user private groups make files group-writable by default).

Trusted on purpose, for a group project that really shares one file: a directory in $ENVRUN_TRUST_DIR
(colon-separated) or in `trusted_dirs:` of the user's own config, and everything below it.

Light on purpose (envrun's start-up path): one stat per directory more than looking for the file; the
config and the group database are read only when a file fails the check.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

TRUST_VARIABLE = "ENVRUN_TRUST_DIR"
_OTHERS_WRITE, _GROUP_WRITE = 0o002, 0o020
_REGULAR, _SYMLINK = 0o100000, 0o120000
_FILE_TYPE = 0o170000


class Ignored:
    """A file envrun found and does not obey: where, and why."""

    __slots__ = ("path", "why")

    def __init__(self, path: str, why: str) -> None:
        self.path = path
        self.why = why

    def fix(self) -> str:
        return (f"if you trust it, add {os.path.dirname(self.path)} to ${TRUST_VARIABLE} (colon-separated) or to "
                "trusted_dirs: in your envrun config; else remove it or run elsewhere")

    def warning(self) -> str:
        """One line: the file, why it is ignored, the fix."""
        return f"ignoring {self.path}: {self.why}; fix: {self.fix()}"


class Walk:
    """What a walk up found: the file to obey (or None), every path looked at, what was ignored and why
    the walk stopped where it did (for the "no image" message)."""

    __slots__ = ("checked", "found", "ignored", "stopped")

    def __init__(self) -> None:
        self.found: str | None = None
        self.checked: list[str] = []
        self.ignored: list[Ignored] = []
        self.stopped = ""  # why the walk ended before / ("" when it reached / or found a file)


class TrustedDirs:
    """The user's trusted directories, read only when a check fails: $ENVRUN_TRUST_DIR, then `trusted_dirs`
    of the user's config (`load_config` returns that list)."""

    def __init__(self, environ: Mapping[str, str], load_config: Callable[[], Sequence[str]] | None = None) -> None:
        self._environ = environ
        self._load_config = load_config
        self._dirs: tuple[str, ...] | None = None

    def covers(self, directory: str) -> bool:
        if self._dirs is None:
            named = [d for d in self._environ.get(TRUST_VARIABLE, "").split(":") if d]
            named += list(self._load_config() if self._load_config else ())
            dirs = [os.path.expanduser(d) for d in named]
            self._dirs = tuple(dict.fromkeys(os.path.normpath(d) for d in (*dirs, *map(os.path.realpath, dirs))
                                             if os.path.isabs(d)))
        return any(directory == d or directory.startswith(d.rstrip("/") + "/") for d in self._dirs)


def walk_up(cwd: str, name: str, trusted: TrustedDirs) -> Walk:
    """The nearest `name` in `cwd` or a parent that envrun may obey (see the module's docstring)."""
    walk = Walk()
    directory = os.path.abspath(cwd)
    device = None
    while True:
        parent = os.path.dirname(directory)
        try:
            status = os.stat(directory)
        except OSError:  # not there (yet): nothing in it to find
            if parent == directory:
                return walk
            directory = parent
            continue
        if device is not None and status.st_dev != device:
            walk.stopped = f"{directory} is another file system"
            return walk
        device = status.st_dev
        candidate = os.path.join(directory, name)
        walk.checked.append(candidate)
        found = _regular_file(candidate)
        if found is not None:
            why = None if trusted.covers(directory) else untrusted_because(candidate, found, status)
            if why is None:
                walk.found = candidate
            else:
                walk.ignored.append(Ignored(candidate, why))
            return walk
        if status.st_uid != os.geteuid() and _others_may_write(status) and not trusted.covers(directory):
            walk.stopped = f"{directory} is not yours and others may write it"
            return walk
        if parent == directory:
            return walk
        directory = parent


def untrusted_because(path: str, status: os.stat_result | None = None, directory: os.stat_result | None = None) -> str | None:
    """Why envrun must not obey the file `path` (see the module's docstring), or None when it may. A
    symbolic link is judged as where it leads: the file there and its directory."""
    try:
        if status is None:
            status = os.lstat(path)
        if status.st_mode & _FILE_TYPE == _SYMLINK:
            real = os.path.realpath(path)
            why = untrusted_because(real, os.stat(real), os.stat(os.path.dirname(real)))
            return f"{why} (it is where the link {path} leads)" if why else None
        if directory is None:
            directory = os.stat(os.path.dirname(path) or ".")
    except OSError as exc:
        return f"cannot be checked ({exc.strerror})"
    uid = os.geteuid()
    problems = []
    if status.st_uid not in (uid, 0):
        problems.append(f"owned by {_user_name(status.st_uid)}, not by you or root")
    if _others_may_write(status):
        problems.append(f"{_who_may_write(status)} may write it")
    if directory.st_uid != uid and _others_may_write(directory):
        problems.append(f"its directory is {_user_name(directory.st_uid)}'s and {_who_may_write(directory)} "
                        f"may write it (mode {directory.st_mode & 0o7777:04o})")
    return "; ".join(problems) or None


def _regular_file(path: str) -> os.stat_result | None:
    """lstat of `path` when it is a regular file or a link to one, else None (absent, a directory...)."""
    try:
        status = os.lstat(path)
        if status.st_mode & _FILE_TYPE == _SYMLINK and os.stat(path).st_mode & _FILE_TYPE != _REGULAR:
            return None
    except OSError:
        return None
    return status if status.st_mode & _FILE_TYPE in (_REGULAR, _SYMLINK) else None


def _others_may_write(status: os.stat_result) -> bool:
    if status.st_mode & _OTHERS_WRITE:
        return True
    return bool(status.st_mode & _GROUP_WRITE) and not _private_group(status.st_gid)


def _who_may_write(status: os.stat_result) -> str:
    if status.st_mode & _OTHERS_WRITE:
        return "everyone"
    return f"group {_group_name(status.st_gid)}"


def _private_group(gid: int) -> bool:
    """Whether `gid` is the user's private group: named as the user, with no other members listed.
    (A user whose primary group it is, is not listed as a member: the name rule excludes shared ones.)"""
    import grp
    import pwd

    try:
        user = pwd.getpwuid(os.geteuid())
        group = grp.getgrgid(gid)
    except KeyError:
        return False
    return group.gr_name == user.pw_name and user.pw_gid == gid and set(group.gr_mem) <= {user.pw_name}


def _user_name(uid: int) -> str:
    import pwd

    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def _group_name(gid: int) -> str:
    import grp

    try:
        return f"{grp.getgrgid(gid).gr_name} (gid {gid})"
    except KeyError:
        return f"gid {gid}"
