"""Paths inside an image tree resolved as if the tree's root were `/`: every read and write a build makes in a
sandbox, a user layer or an overlay's venv stays inside that tree, whatever symbolic links the base put there.

A base image is data from elsewhere: its `/.envbuild` may be a link to `/home/someone`, its `/opt` a link to
`../../..`. Joining strings (`f"{sandbox}{path}"`) and letting the kernel follow such links made a build write
its record on the host and read a host file into the image's labels. Here an absolute link target starts again
at the tree's root and `..` stops at it, as inside the container: a link loop is an error (ELOOP), a dangling
link leads to a missing file (for mkdir -p: to its target, made inside the tree).

The kernel does it in one call where it can: openat2(2) with RESOLVE_IN_ROOT (Linux 5.6). Elsewhere (older
kernels, a seccomp filter that refuses the call) the walk of envbuild.imagetree.inroot does the same one
component at a time, opening each directory relative to the last with O_NOFOLLOW and reading each link
itself. Both end with a file descriptor, so nothing is resolved twice. Writes never follow a link in the last
component: a file is written under a new name (O_EXCL | O_NOFOLLOW) in its resolved directory and renamed over
the old one.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import os
import posixpath
import shutil
import stat
import sys
from collections.abc import Callable, Iterator
from typing import BinaryIO

from envbuild.imagetree.inroot import MAX_SYMLINK_HOPS, Link, resolve_in_root

# openat2(2): the same syscall number on every architecture Linux added it to after the unified table (5.6).
_SYS_OPENAT2 = 437
_RESOLVE_NO_MAGICLINKS = 0x02  # no /proc/self/fd/N style jumps
_RESOLVE_IN_ROOT = 0x10  # as if the dirfd were the root: absolute links and `..` stay inside
_PARTIAL = ".{name}.envbuild-partial-{pid}"


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


class OutsideTree(OSError):
    """A path inside a tree that cannot be used as asked (a file where a directory must be, no name to write)."""


@functools.cache
def _libc_syscall() -> Callable[..., int] | None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        call = libc.syscall
        call.restype = ctypes.c_long
        call.argtypes = (ctypes.c_long, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_size_t)
    except (OSError, AttributeError):
        return None
    return call


@functools.cache
def kernel_resolves_in_root() -> bool:
    """Whether openat2 with RESOLVE_IN_ROOT works here (asked once per process)."""
    with contextlib.suppress(OSError):
        fd = _openat2(os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC), ".", os.O_PATH, 0, close_dirfd=True)
        os.close(fd)
        return True
    return False


def _openat2(dirfd: int, path: str, flags: int, mode: int, *, close_dirfd: bool = False, shown: str = "") -> int:
    call = _libc_syscall()
    try:
        if call is None:
            raise OSError(errno.ENOSYS, "no syscall() in this C library")
        how = _OpenHow(flags | os.O_CLOEXEC, mode if flags & os.O_CREAT else 0, _RESOLVE_IN_ROOT | _RESOLVE_NO_MAGICLINKS)
        for _attempt in range(16):  # EAGAIN: a rename elsewhere raced the lookup; the kernel asks to try again
            fd = call(_SYS_OPENAT2, dirfd, os.fsencode(path), ctypes.byref(how), ctypes.sizeof(how))
            if fd >= 0:
                return int(fd)
            number = ctypes.get_errno()
            if number != errno.EAGAIN:
                raise OSError(number, os.strerror(number), shown or path)
        raise OSError(errno.EAGAIN, os.strerror(errno.EAGAIN), shown or path)
    finally:
        if close_dirfd:
            os.close(dirfd)


def _components(inside: str) -> list[str]:
    return [part for part in inside.split("/") if part not in ("", ".")]


def _walk_open(root_fd: int, inside: str, flags: int, mode: int) -> int:
    """openat2(RESOLVE_IN_ROOT) done by hand: envbuild.imagetree.inroot's walk over real directories, each opened
    relative to the last with O_NOFOLLOW, each link read and walked in its place (an absolute one from the root
    again), `..` back to the directory opened before (never above the root); a loop of links is ELOOP."""
    with_flags: set[int] = set()  # the descriptor of the last name, opened with the caller's flags

    def step(here: int, name: str, last: bool) -> int | Link:
        try:
            info = os.stat(name, dir_fd=here, follow_symlinks=False)
        except FileNotFoundError:
            if not (last and flags & os.O_CREAT):
                raise
            info = None
        if info is not None and stat.S_ISLNK(info.st_mode) and not (last and flags & os.O_NOFOLLOW):
            return Link(os.readlink(name, dir_fd=here))
        if last:
            # O_NOFOLLOW: had the entry become a link since the stat, this fails instead of following it.
            fd = os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=here)
            with_flags.add(fd)
            return fd
        if info is None or not stat.S_ISDIR(info.st_mode):
            raise OSError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), f"{inside} (inside the tree)")
        return os.open(name, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=here)

    found = resolve_in_root(inside, root_fd, step, os.close)
    if found is None:  # the step raises for a missing name: None is only the limit on links
        raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), f"{inside} (inside the tree)")
    if found in with_flags:
        return found
    # a directory the walk ended on (the root, `..`, a link to `/`): opened now with the caller's flags
    try:
        return os.open(".", flags | os.O_CLOEXEC, mode, dir_fd=found)
    finally:
        if found != root_fd:
            os.close(found)


def open_in_tree(root: str, inside: str, flags: int, mode: int = 0o644, *, walk: bool | None = None) -> int:
    """os.open of `inside` resolved within `root` as if `root` were `/`; O_NOFOLLOW in `flags` keeps a link in
    the last component from being followed (O_PATH | O_NOFOLLOW opens the link itself). `walk`: None takes
    openat2 where the kernel has it, True the component walk (tests use both)."""
    root_fd = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        use_walk = (not kernel_resolves_in_root()) if walk is None else walk
        if use_walk:
            return _walk_open(root_fd, inside, flags, mode)
        return _openat2(root_fd, inside.lstrip("/") or ".", flags, mode, shown=f"{root.rstrip('/')}{inside} (inside the tree {root})")
    finally:
        os.close(root_fd)


@contextlib.contextmanager
def parent_in_tree(root: str, inside: str, *, walk: bool | None = None) -> Iterator[tuple[int, str]]:
    """(a descriptor of the directory that holds `inside`, resolved within `root`; the last name), for the
    *at() calls that act on the name itself, never on what a link there points to."""
    parts = inside.rstrip("/").rsplit("/", 1)
    name = parts[-1]
    if name in ("", ".", "..") or not inside.startswith("/"):
        raise OutsideTree(errno.EINVAL, f"{inside!r} names no entry inside the tree (an absolute path to a file is needed)",
                          f"{root}{inside}")
    fd = open_in_tree(root, parts[0] or "/", os.O_PATH | os.O_DIRECTORY, walk=walk)
    try:
        yield fd, name
    finally:
        os.close(fd)


def link_leading_out(root: str, inside: str) -> tuple[str, str] | None:
    """(the link, its target) of the first symbolic link on the way to `inside` that the host (not this module)
    resolves to somewhere outside `root`; None when the host stays inside the tree all the way. For tools that
    take a host path into the tree."""
    top = os.path.realpath(root)
    path = root.rstrip("/")
    for part in _components(inside):
        path = f"{path}/{part}"
        if os.path.islink(path):
            lands = os.path.realpath(path)
            if lands != top and not lands.startswith(top.rstrip("/") + "/"):
                return path[len(root.rstrip("/")):], os.readlink(path)
    return None


def host_path(fd: int) -> str:
    """Where an opened descriptor lies on the host (for tools that take a path: no link left on the way)."""
    return os.readlink(f"/proc/self/fd/{fd}")


def read_in_tree(root: str, inside: str, *, walk: bool | None = None) -> tuple[bytes, int] | None:
    """(content, permission bits) of the regular file `inside`, or None when there is none."""
    try:
        fd = open_in_tree(root, inside, os.O_RDONLY | os.O_NONBLOCK, walk=walk)
    except (FileNotFoundError, NotADirectoryError):
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return None  # a fifo, a device or a directory put there by the base: nothing to read
        with os.fdopen(os.dup(fd), "rb") as handle:
            return handle.read(), stat.S_IMODE(info.st_mode)
    finally:
        os.close(fd)


def write_in_tree(root: str, inside: str, data: bytes | str, mode: int, *, walk: bool | None = None) -> None:
    """Write `inside` atomically: a new file (O_CREAT | O_EXCL | O_NOFOLLOW) in the resolved directory, given
    `mode` exactly, then renamed over whatever was there (a link there is replaced, never written through)."""
    payload = data.encode("utf-8") if isinstance(data, str) else data
    with parent_in_tree(root, inside, walk=walk) as (parent, name):
        _write_new(parent, name, mode, lambda handle: handle.write(payload))


def _write_new(parent: int, name: str, mode: int, fill: Callable[[BinaryIO], object],
               times: tuple[int, int] | None = None) -> None:
    partial = _PARTIAL.format(name=name, pid=os.getpid())
    with contextlib.suppress(FileNotFoundError):
        os.unlink(partial, dir_fd=parent)  # left by a killed build of this same process id
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            fill(handle)
            handle.flush()
            os.fchmod(handle.fileno(), mode)  # exactly `mode`: not less the umask, never more than asked
            if times is not None:
                os.utime(handle.fileno(), ns=times)  # after the last write, which would set the time again
        os.rename(partial, name, src_dir_fd=parent, dst_dir_fd=parent)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(partial, dir_fd=parent)
        raise


def make_dirs_in_tree(root: str, inside: str, mode: int | None = None, *, walk: bool | None = None,
                      links: int = MAX_SYMLINK_HOPS) -> None:
    """mkdir -p inside the tree: each missing directory made in its resolved parent, with exactly `mode` (None:
    the umask's); existing ones (links to directories inside the tree included) are left as they are. A link
    that leads nowhere gets its target made, inside the tree, as the container would see it."""
    parts = _components(inside)
    for depth in range(1, len(parts) + 1):
        prefix = "/" + "/".join(parts[:depth])
        try:
            os.close(open_in_tree(root, prefix, os.O_PATH | os.O_DIRECTORY, walk=walk))
            continue
        except FileNotFoundError:
            pass
        with parent_in_tree(root, prefix, walk=walk) as (parent, name):
            try:
                os.mkdir(name, 0o700 if mode is not None else 0o777, dir_fd=parent)
            except FileExistsError:
                if links <= 0 or not stat.S_ISLNK(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode):
                    raise OutsideTree(errno.ENOTDIR, f"{prefix} in the tree is not a directory", f"{root}{prefix}") from None
                target = posixpath.join(_inside_of(root, parent), os.readlink(name, dir_fd=parent))
                make_dirs_in_tree(root, target, mode, walk=walk, links=links - 1)
                continue
            if mode is not None:
                fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
                try:
                    os.fchmod(fd, mode)
                finally:
                    os.close(fd)


def _inside_of(root: str, fd: int) -> str:
    """The path inside the tree of an opened directory of it."""
    return host_path(fd)[len(os.path.realpath(root)):] or "/"


def touch_in_tree(root: str, inside: str, *, walk: bool | None = None) -> None:
    """An empty file at `inside` when nothing is there (a mount point for a file bind)."""
    with parent_in_tree(root, inside, walk=walk) as (parent, name):
        with contextlib.suppress(FileExistsError):
            os.close(os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=parent))


def remove_in_tree(root: str, inside: str, *, walk: bool | None = None) -> None:
    """rm -rf of `inside`: a link is removed itself, a directory with everything below it (never leaving the
    tree through a link); nothing there is fine."""
    try:
        with parent_in_tree(root, inside, walk=walk) as (parent, name):
            _remove_entry(parent, name)
    except (FileNotFoundError, NotADirectoryError):
        return  # no such entry, or no directory that could hold it


def rename_out_of_tree(root: str, inside: str, dest: str, *, walk: bool | None = None) -> None:
    """Move the entry `inside` (the entry itself, not what a link there points to) to the host path `dest`."""
    with parent_in_tree(root, inside, walk=walk) as (parent, name):
        os.rename(name, dest, src_dir_fd=parent)


def copy_into_tree(src: str, root: str, inside: str, mode: int | None, *, walk: bool | None = None) -> None:
    """Copy the host file or directory `src` to `inside`, as cp -a would but never through a link of the tree:
    a file is written new and renamed into place; a directory's files likewise, its directories made inside the
    tree, its links copied as links. Permission bits are the source's (`mode`, when given, for `inside`
    itself), never widened; times are kept."""
    source = os.stat(src)
    if not stat.S_ISDIR(source.st_mode):
        _copy_file(src, root, inside, mode, walk)
        return
    make_dirs_in_tree(root, inside, walk=walk)
    _copy_directory(src, root, inside.rstrip("/"), walk)
    _set_mode(root, inside, stat.S_IMODE(source.st_mode) if mode is None else mode, source, walk)


def _copy_file(src: str, root: str, inside: str, mode: int | None, walk: bool | None) -> None:
    with open(src, "rb") as source:
        info = os.fstat(source.fileno())
        with parent_in_tree(root, inside, walk=walk) as (parent, name):
            def fill(handle: BinaryIO) -> None:
                _copy_content(source.fileno(), handle.fileno(), info.st_size)

            _write_new(parent, name, stat.S_IMODE(info.st_mode) if mode is None else mode, fill,
                       (info.st_atime_ns, info.st_mtime_ns))


def _copy_content(source: int, target: int, size: int) -> None:
    """In the kernel (copy_file_range: no copy through this process, a reflink where the file system makes one),
    else by reading and writing."""
    done = 0
    try:
        while done < size:
            count = os.copy_file_range(source, target, size - done)
            if count == 0:
                break
            done += count
    except OSError as exc:
        if exc.errno not in (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
            raise
    os.lseek(source, done, os.SEEK_SET)
    os.lseek(target, done, os.SEEK_SET)
    while chunk := os.read(source, 1 << 20):  # what is left (a file that grew, or no copy_file_range here)
        view = memoryview(chunk)
        while view:
            view = view[os.write(target, view):]


def _copy_directory(src: str, root: str, inside: str, walk: bool | None) -> None:
    for entry in os.scandir(src):
        target = f"{inside}/{entry.name}"
        if entry.is_symlink():
            link = os.readlink(entry.path)
            with parent_in_tree(root, target, walk=walk) as (parent, name):
                with contextlib.suppress(FileNotFoundError):
                    _remove_entry(parent, name)
                os.symlink(link, name, dir_fd=parent)
        elif entry.is_dir(follow_symlinks=False):
            _directory_for(root, target, walk)
            _copy_directory(entry.path, root, target, walk)
            _set_mode(root, target, stat.S_IMODE(entry.stat(follow_symlinks=False).st_mode),
                      entry.stat(follow_symlinks=False), walk)
        elif entry.is_file(follow_symlinks=False):
            _copy_file(entry.path, root, target, None, walk)
        # sockets, fifos and devices in a spec's directory are not copied


def _directory_for(root: str, inside: str, walk: bool | None) -> None:
    """A directory at `inside` for a source directory's entries: one there already (or a link to one, which
    resolves inside the tree) is used, anything else replaced by a new directory."""
    with contextlib.suppress(OSError):
        os.close(open_in_tree(root, inside, os.O_PATH | os.O_DIRECTORY, walk=walk))
        return
    with parent_in_tree(root, inside, walk=walk) as (parent, name):
        with contextlib.suppress(FileNotFoundError):
            _remove_entry(parent, name)  # a file, or a dangling link, where the source has a directory
        os.mkdir(name, 0o700, dir_fd=parent)


def _remove_entry(parent: int, name: str) -> None:
    info = os.stat(name, dir_fd=parent, follow_symlinks=False)
    if not stat.S_ISDIR(info.st_mode):
        os.unlink(name, dir_fd=parent)
    elif sys.version_info >= (3, 11):
        shutil.rmtree(name, dir_fd=parent)
    else:
        remove_tree_at(parent, name)


def remove_tree_at(parent: int, name: str) -> None:
    """The directory `name` in the directory open as `parent`, and all in it, never following a symlink:
    shutil.rmtree's dir_fd form, which Python 3.10 lacks."""
    fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=parent)
    try:
        with os.scandir(fd) as entries:
            children = [(entry.name, entry.is_dir(follow_symlinks=False)) for entry in entries]
        for child, is_directory in children:
            if is_directory:
                remove_tree_at(fd, child)
            else:
                os.unlink(child, dir_fd=fd)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=parent)


def _set_mode(root: str, inside: str, mode: int, times: os.stat_result, walk: bool | None) -> None:
    """A directory's bits and times, set through a descriptor of it resolved inside the tree."""
    fd = open_in_tree(root, inside, os.O_RDONLY | os.O_DIRECTORY, walk=walk)
    try:
        os.fchmod(fd, mode)
        os.utime(fd, ns=(times.st_atime_ns, times.st_mtime_ns))
    finally:
        os.close(fd)


def list_in_tree(root: str, inside: str, *, walk: bool | None = None) -> list[tuple[str, os.stat_result]]:
    """The entries of the directory `inside` (resolved within the tree), each as it is there (lstat: a link is
    a link, never followed); an empty list when there is no such directory."""
    try:
        fd = open_in_tree(root, inside, os.O_RDONLY | os.O_DIRECTORY, walk=walk)
    except (FileNotFoundError, NotADirectoryError):
        return []
    try:
        return [(name, os.stat(name, dir_fd=fd, follow_symlinks=False)) for name in os.listdir(fd)]
    finally:
        os.close(fd)
