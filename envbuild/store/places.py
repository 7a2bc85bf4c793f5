"""The store's own directories (trash, work, locks, the kind directories), opened by descriptor.

A group store (setgid, 2770, umask 007) lets every member create, rename and remove names in its root. A
member who replaced `trash` with a link to another user's `~/data` would have that user's next build (the
debris sweep runs before every build) list and delete `~/data/*`. So the root is opened once and each of
its own directories is opened below it with O_NOFOLLOW (envbuild.shared.safefiles.subdir); a link there, or a
directory owned by someone who is neither the user, nor root, nor the store's owner, nor a member of the
store's group, is refused with UnsafePlaceError. Everything below is then listed, sized, renamed and removed
relative to those descriptors, never crossing a link.

One link is still followed: the user's own, in a store nobody else may write (a kind directory kept on
another file system on purpose). Nobody but the user could have put it there.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from envbuild.shared import safefiles
from envbuild.shared.safefiles import UnsafePlaceError
from envbuild.store.layout import ENTRY_DIRS

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


class OpenStore:
    """The store root held open, and its own directories opened below it on first use (closed with it).
    `create`: make the root when it is missing (else FileNotFoundError)."""

    def __init__(self, root: Path | str, *, create: bool = False) -> None:
        self.root = Path(root)
        self.fd = open_store_root(self.root, create=create)
        self.info = os.fstat(self.fd)
        self._dirs: dict[str, int] = {}

    def close(self) -> None:
        for fd in self._dirs.values():
            os.close(fd)
        self._dirs.clear()
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> OpenStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def dir(self, name: str, *, create: bool = False) -> int | None:
        """The descriptor of the store's own directory `name` (owned by this object: do not close it); None
        when it is missing and not `create`. Raises UnsafePlaceError for a link or a stranger's directory."""
        if name in self._dirs:
            return self._dirs[name]
        fd = open_store_dir(self.fd, self.info, name, where=str(self.root / name), create=create)
        if fd is not None:
            self._dirs[name] = fd
        return fd

    def kind_dir(self, kind: str, *, create: bool = False) -> int | None:
        """The directory holding entries of `kind` (base, env, image, overlay, work, trash; download: the root)."""
        if kind == "download":
            return self.fd
        return self.dir(ENTRY_DIRS.get(kind, kind), create=create)


def open_store_root(root: Path | str, *, create: bool = False) -> int:
    """The descriptor of the store root `root`. The path is the user's and is resolved as given, but a link on
    the way, or at its last component, that lies in a directory others may write (a group project's `store`)
    and that the user did not make is refused, since a member could point it at the user's files. The user's
    own link (~/.cache/envbuild to a scratch file system) is followed. FileNotFoundError when it is missing
    and not `create`."""
    where = os.fspath(root)
    parent, name = os.path.split(where.rstrip("/"))
    if not name or name in (".", ".."):
        return safefiles.open_dir(where, create=create)
    parent_fd = _open_parent(parent or "/", create=create)
    try:
        try:
            found = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
        except FileNotFoundError:
            if not create:
                raise
            found = None
        if found is not None and stat.S_ISLNK(found.st_mode):
            if found.st_uid in (os.geteuid(), 0) or not safefiles.writable_by_others(os.fstat(parent_fd)):
                return os.open(name, _DIR_FLAGS, dir_fd=parent_fd)  # the user's own link, or root's
            raise UnsafePlaceError(
                f"the store {where} is a symbolic link made by {_user(found.st_uid)} in a directory others may "
                "write: envbuild never follows it, since it could point at your files",
                f"check who made it (ls -l {where}); remove the link and run again (envbuild makes the store "
                "again), or give --cache-dir / $ENVBUILD_CACHE_DIR a store of your own")
        # A store someone else made (a colleague's group store) is fine: its directories are judged below.
        trusted = (found.st_uid,) if found is not None else ()
        return safefiles.subdir(parent_fd, name, create=create, where=where, also_trusted=trusted)
    finally:
        os.close(parent_fd)


def _open_parent(path: str, *, create: bool) -> int:
    # One component at a time (safefiles.open_dir): a link on the way is followed when it is the user's own or
    # root's, or lies in a directory nobody else may write, never one another member planted in a group
    # directory (`--cache-dir /project/stores/team` with `stores` a link to the user's files). A parent the user
    # can only pass through (0711, as /var/tmp/x or a home) is opened O_PATH: looking up, making and opening a
    # name in it needs no more.
    return safefiles.open_dir(path, create=create)


def open_store_dir(root_fd: int, root_info: os.stat_result, name: str, *, where: str,
                   create: bool = False) -> int | None:
    """See OpenStore.dir: `name` in the store root `root_fd` (whose fstat is `root_info`)."""
    try:
        found = os.stat(name, dir_fd=root_fd, follow_symlinks=False)
    except FileNotFoundError:
        if not create:
            return None
        found = None
    if found is not None and stat.S_ISLNK(found.st_mode):
        return _follow_own_link(root_fd, root_info, name, found, where)
    # The owner is judged below, on the descriptor opened, with the store's rules (a member's is accepted).
    trusted = (found.st_uid,) if found is not None else ()
    try:
        fd = safefiles.subdir(root_fd, name, create=create, where=where, also_trusted=trusted)
    except FileNotFoundError:
        return None  # removed meanwhile
    info = os.fstat(fd)
    if safefiles.writable_by_others(root_info) and not _acceptable_owner(info, root_info):
        os.close(fd)  # the directory was swapped for a stranger's after it was looked at
        raise _stranger_error(where, info, root_info)
    return fd


def below_store(root: Path | str, path: str) -> str | None:
    """`path` relative to the store root `root` when it lies below it (compared as written, no link
    resolved), else None."""
    relative = os.path.relpath(os.path.abspath(path), os.path.abspath(root))
    return None if relative == "." or relative == ".." or relative.startswith("../") else relative


def make_store_dirs(root: Path | str, path: str, *, mode: int | None = None, new: bool = False) -> None:
    """`mkdir -p path` for a directory below the store root `root` (a build's work directory, an entry, an
    image tree's root): the root opened the store's way, the store's own directory (work, envs, ...) with
    OpenStore.dir's rules, and each component below it made or opened by descriptor, never through a link
    (safefiles.make_dirs_at). In a group store every member may create names in a build's directories: a
    link one of them planted where a directory goes is refused (UnsafePlaceError, with its fix), as is a
    directory of someone the store does not trust; the build would otherwise make and write its files in the
    link's target. `mode`: the exact bits of each directory made below the store's own (None: the umask's).
    `new`: `path` must be made here (a build's own work directory, named at random): one already there was
    made by someone else, and is refused."""
    relative = below_store(root, path)
    if relative is None:
        raise ValueError(f"{path} is not below the store {root}")
    own, _, rest = relative.partition("/")
    where = str(Path(root) / own)
    with OpenStore(root, create=True) as store:
        linked_fd = _own_link_target(store.fd, own, where)
        own_fd = linked_fd if linked_fd is not None else store.dir(own, create=True)
        try:
            if own_fd is None:
                raise FileNotFoundError(errno.ENOENT, "removed while it was being made", where)
            if rest:
                info = store.info

                def trusted(found: os.stat_result) -> bool:
                    return not safefiles.writable_by_others(info) or _acceptable_owner(found, info)

                os.close(safefiles.make_dirs_at(own_fd, rest, mode=mode, where=where, trusted=trusted, new=new))
        finally:
            if linked_fd is not None:
                os.close(linked_fd)


def _own_link_target(root_fd: int, name: str, where: str) -> int | None:
    """The directory that the store's own directory `name`, when it is the user's own link (a download cache
    kept elsewhere: `uv -> /scratch/me/uv`), leads to; None when `name` is anything else. Only something
    made in it goes this way, also in a store others may write (listing and removal keep OpenStore.dir's
    rule): the link is held by its own descriptor while it is judged and read, so one a member swapped in
    meanwhile is never the one followed, and its target, the user's own path, is opened as the user's
    paths are (safefiles.open_dir)."""
    try:
        link_fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=root_fd)
    except FileNotFoundError:
        return None
    try:
        info = os.fstat(link_fd)
        if not stat.S_ISLNK(info.st_mode) or info.st_uid != os.geteuid():
            return None
        target = os.readlink("", dir_fd=link_fd)  # the link held, not the name looked up again
    finally:
        os.close(link_fd)
    return safefiles.open_dir(os.path.join(os.path.dirname(where), target))


def _acceptable_owner(info: os.stat_result, root_info: os.stat_result) -> bool:
    """The user, root, the store's owner (whoever the user chose to share a store with), or, in a group
    store, a member: a directory a member made first carries the store's group (the root is setgid)."""
    if info.st_uid in (os.geteuid(), 0, root_info.st_uid):
        return True
    return bool(root_info.st_mode & stat.S_IWGRP) and info.st_gid == root_info.st_gid


def others_may_write(info: os.stat_result) -> bool:
    """Whether someone besides the user (or root) may create or remove names in a directory with this stat:
    it is someone else's, writable by every user, or writable by a group that is not the user's own private
    group (Debian and Red Hat give each user one: with umask 002 their directories are group-writable)."""
    if info.st_uid not in (os.geteuid(), 0) or info.st_mode & stat.S_IWOTH:
        return True
    return bool(info.st_mode & stat.S_IWGRP) and not is_private_group(info.st_gid)


def is_private_group(gid: int) -> bool:
    """The user's own group, as Debian and Red Hat make one per user (named after them, their primary group,
    no other members listed): with umask 002 their files are group-writable, and nobody else is in that
    group. (That no other account has it as its primary group is assumed: listing every account is slow
    where accounts come from a directory service.)"""
    import grp
    import pwd

    if gid != os.getegid():
        return False
    try:
        me, group = pwd.getpwuid(os.geteuid()), grp.getgrgid(gid)
    except KeyError:
        return False
    return group.gr_name == me.pw_name and set(group.gr_mem) <= {me.pw_name}


def _follow_own_link(root_fd: int, root_info: os.stat_result, name: str, link: os.stat_result, where: str) -> int | None:
    if link.st_uid == os.geteuid() and not others_may_write(root_info):
        try:
            return os.open(name, _DIR_FLAGS, dir_fd=root_fd)  # the user's own link in the user's own store
        except FileNotFoundError:
            return None  # a dangling link: nothing is there to list or remove
    try:
        target = os.readlink(name, dir_fd=root_fd)
    except OSError:
        target = "?"
    owner = "you" if link.st_uid == os.geteuid() else _user(link.st_uid)
    raise UnsafePlaceError(
        f"{where} is a symbolic link (to {target}, made by {owner}) in a store others may write: envbuild never "
        "follows it, since whoever can write the store could point it at your files and a clean-up would delete them",
        f"check who made it (ls -l {where}); remove the link (rm {where}) and run again: envbuild makes the "
        "directory again. A store directory kept on another file system through a link works only in a store "
        "nobody else may write")


def _stranger_error(where: str, info: os.stat_result, root_info: os.stat_result) -> UnsafePlaceError:
    return UnsafePlaceError(
        f"{where} belongs to {_user(info.st_uid)}, who is neither you, nor root, nor the store's owner "
        f"({_user(root_info.st_uid)}), nor a member of its group (gid {root_info.st_gid}): in a store others may "
        "write, what envbuild lists and removes there could be swapped",
        f"check who made it (ls -ld {where}); remove it, or ask its owner or an administrator to, and run again")


def _user(uid: int) -> str:
    import pwd

    try:
        return f"user {pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def open_entry(kind_fd: int, name: str) -> int | None:
    """The descriptor of the entry directory `name`, never through a link; None when it is gone or is not a
    directory any more (swapped for a link or a file since it was listed)."""
    try:
        return os.open(name, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=kind_fd)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ELOOP, errno.ENOTDIR):
            return None
        raise


def open_entry_path(entry_dir: Path | str) -> int | None:
    """The descriptor of the entry directory `<root>/<kind dir>/<name>` opened the store's way: the root as
    given, its kind directory refusing a link or a stranger's (UnsafePlaceError), the entry never through a
    link. None when the kind directory or the entry is missing."""
    entry = Path(entry_dir)
    with OpenStore(entry.parent.parent) as store:
        kind_fd = store.dir(entry.parent.name)
        return None if kind_fd is None else open_entry(kind_fd, entry.name)


def refuse_linked_entry(root: Path | str, kind: str, name: str) -> None:
    """Before a build makes or fills the entry `name` of `kind` (under its lock): the entry, if there, must be a
    real directory of the store, reached through the store's own directories (no link anywhere below the
    root). A member who swapped the entry for a link to another user's files would have the build write and
    then clean up there. Raises UnsafePlaceError naming the link and the fix."""
    if kind == "download":
        return
    with OpenStore(root, create=True) as store:
        kind_fd = store.kind_dir(kind, create=True)
        if kind_fd is None:
            return
        try:
            info = os.stat(name, dir_fd=kind_fd, follow_symlinks=False)
        except FileNotFoundError:
            return
        if not stat.S_ISDIR(info.st_mode):
            where = str(Path(root) / ENTRY_DIRS.get(kind, kind) / name)
            what = "a symbolic link" if stat.S_ISLNK(info.st_mode) else "not a directory"
            raise UnsafePlaceError(
                f"the store entry {where} is {what}: a build never writes into an entry through a link",
                f"check who made it (ls -l {where}), then remove it (rm {where}); the build makes the entry again")
