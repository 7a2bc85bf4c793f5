"""Which files envrun takes from the file system without being told (the nearest envrun.yaml, the one *.sif
in the working directory) it may obey, on a machine shared with other users.

Such a file chooses the image, binds and variables of the user's run, so one planted by someone else is
someone else running code as the user. git's rule for repositories after CVE-2022-24765 is the model:

- the walk up from the working directory stops at a file system boundary (a project does not span
  mounts; / and a scratch root are other file systems than the project) and at the first directory that
  is not the user's and that others may write (a sticky /tmp or scratch root): nothing above such a
  directory is the user's project, and anyone may put an envrun.yaml there;
- a file found is obeyed only when it belongs to the user or root, nobody else may write it, and its
  directory is the user's (or root's) and nobody else may write it: another user's directory, even 0755,
  is that user's to fill, and the paths the file names relative to it lead there;
- a symbolic link is judged itself (its owner, its directory: who may change where it leads) and the file it
  leads to (owner, writers, directory); relative paths in it lead from the real file's directory, the one
  judged, never from the link's;
- the file is judged and read through one descriptor (O_NOFOLLOW unless it is a link; fstat of what was
  opened), so a file or link swapped between the check and the read is never what is obeyed;
- a file that fails this is ignored with one line on stderr naming it, its owner and the fix, and the
  walk ends there (the nearest file was meant; a farther one would change meaning silently).

"Others may write" counts the group too, except the user's own private group (a group of the user's name
with no other members: Debian's and RHEL's user private groups make files group-writable by default).

Trusted on purpose, for a group project that really shares one file: a directory in $ENVRUN_TRUST_DIR
(colon-separated) or in `trusted_dirs:` of the user's own config, and everything below it.

Light on purpose (envrun's start-up path): one stat per directory more than looking for the file, and the
file found is opened once; the config and the group database are read only when a file fails the check.
"""

from __future__ import annotations

import errno
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

    __slots__ = ("base", "checked", "content", "found", "ignored", "stopped")

    def __init__(self) -> None:
        self.found: str | None = None
        self.content = b""  # the found file's bytes, read from the descriptor that was judged
        self.base = ""  # the real directory of the found file: its relative paths lead from there
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
    """The nearest `name` in `cwd` or a parent that envrun may obey (see the module's docstring), judged and
    read through one descriptor: `Walk.content` is what was judged, `Walk.base` where its paths lead from."""
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
        try:
            entry = os.lstat(candidate)
        except OSError:
            entry = None
        if entry is not None and entry.st_mode & _FILE_TYPE in (_REGULAR, _SYMLINK):
            judged = _judge_and_read(candidate, entry, status, trusted)
            if judged is not None:  # a file (not a directory or device, nor a link to one): the walk ends here
                why, content, real = judged
                if why is None:
                    walk.found, walk.content, walk.base = candidate, content, os.path.dirname(real)
                else:
                    walk.ignored.append(Ignored(candidate, why))
                return walk
        if status.st_uid != os.geteuid() and _others_may_write(status) and not trusted.covers(directory):
            walk.stopped = f"{directory} is not yours and others may write it"
            return walk
        if parent == directory:
            return walk
        directory = parent


def untrusted_because(path: str, status: os.stat_result | None = None, directory: os.stat_result | None = None,
                      trusted: TrustedDirs | None = None) -> str | None:
    """Why envrun must not obey the file `path` (see the module's docstring), or None when it may. A
    symbolic link is judged itself (its owner and directory) and as where it leads: the file there and its
    directory (unless `trusted` covers that). For a file that is then read, walk_up judges the descriptor
    it reads instead."""
    try:
        if status is None:
            status = os.lstat(path)
        if directory is None:
            directory = os.stat(os.path.dirname(path) or ".")
        if status.st_mode & _FILE_TYPE != _SYMLINK:
            return _problems(status, directory)
        real = os.path.realpath(path)
        target, target_directory = os.stat(real), os.stat(os.path.dirname(real))
    except OSError as exc:
        return f"cannot be checked ({exc.strerror})"
    target_why = _problems(target, target_directory)
    if target_why and trusted is not None and trusted.covers(os.path.dirname(real)):
        target_why = None
    return _joined(_link_problems(status, directory), target_why, path)


def _judge_and_read(path: str, entry: os.stat_result, directory: os.stat_result,
                    trusted: TrustedDirs) -> tuple[str | None, bytes, str] | None:
    """(why envrun must not obey it or None, its content, its real path) of the file or link `path`, judged
    on the descriptor that is read, so that nothing swapped in between is what is obeyed. None when it is
    no regular file after all (a link to a directory or a device: looked past, as a directory would be).
    The trusted directories are looked at only for a file that fails (they may read the user's config)."""
    link = entry.st_mode & _FILE_TYPE == _SYMLINK
    try:
        if link and not _is_regular(os.stat(path)):  # never open a device or FIFO a link names
            return None
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | (0 if link else os.O_NOFOLLOW))
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            return None
        if exc.errno == errno.ELOOP and not link:  # made a link since the lstat: judged as one, looked at afresh
            try:
                again = os.lstat(path)
            except OSError:
                return None
            if again.st_mode & _FILE_TYPE == _SYMLINK:  # judged as a link now (that branch never comes back here)
                return _judge_and_read(path, again, directory, trusted)
            return "cannot be checked (it changed while being looked at)", b"", path
        return f"cannot be checked ({exc.strerror})", b"", path
    try:
        status = os.fstat(fd)
        if not _is_regular(status):
            return None
        real = _opened_path(fd, path) if link else path
        why = _problems(status, os.stat(os.path.dirname(real)) if link else directory)
        if why and trusted.covers(os.path.dirname(real)):
            why = None
        if link:
            link_why = _link_problems(entry, directory)
            why = _joined(None if link_why and trusted.covers(os.path.dirname(path)) else link_why, why, path)
        return why, _read_all(fd) if why is None else b"", real
    except OSError as exc:
        return f"cannot be checked ({exc.strerror})", b"", path
    finally:
        os.close(fd)


def _link_problems(link: os.stat_result, directory: os.stat_result) -> str | None:
    """Who may change where a link leads: its owner, and who may replace it in its directory."""
    problems = []
    if link.st_uid not in (os.geteuid(), 0):
        problems.append(f"it is a link owned by {_user_name(link.st_uid)}, not by you or root")
    if why := _directory_problem(directory):
        problems.append(why)
    return "; ".join(problems) or None


def _joined(link_why: str | None, target_why: str | None, path: str) -> str | None:
    """The problems of a link and of the file it leads to, in one line."""
    target = f"{target_why} (it is where the link {path} leads)" if target_why else None
    return "; ".join(why for why in (link_why, target) if why) or None


def _problems(status: os.stat_result, directory: os.stat_result) -> str | None:
    """What makes a file with this stat, in a directory with that stat, not the user's to obey."""
    problems = []
    if status.st_uid not in (os.geteuid(), 0):
        problems.append(f"owned by {_user_name(status.st_uid)}, not by you or root")
    if _others_may_write(status):
        problems.append(f"{_who_may_write(status)} may write it")
    if why := _directory_problem(directory):
        problems.append(why)
    return "; ".join(problems) or None


def _directory_problem(directory: os.stat_result) -> str | None:
    """A directory others may write, or that is another user's (even 0755: its owner may put or swap any
    file in it, and the paths a file there names relative to it), is not the user's to trust."""
    uid = os.geteuid()
    mode = directory.st_mode & 0o7777
    if _others_may_write(directory):
        owner = "yours" if directory.st_uid == uid else f"{_user_name(directory.st_uid)}'s"
        return f"its directory is {owner} and {_who_may_write(directory)} may write it (mode {mode:04o})"
    if directory.st_uid not in (uid, 0):
        return f"its directory is {_user_name(directory.st_uid)}'s, not yours or root's (mode {mode:04o})"
    return None


def _is_regular(status: os.stat_result) -> bool:
    return status.st_mode & _FILE_TYPE == _REGULAR


def _opened_path(fd: int, fallback: str) -> str:
    """The real path of the file open on `fd` (what the kernel opened, links resolved), else the link's."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return os.path.realpath(fallback)


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
    return b"".join(chunks)


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
