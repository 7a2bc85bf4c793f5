"""The one home of every file effect in a place others may write.

Stores, project and job directories, report and output paths and kernel prefixes may be writable by other
members of a group. Everything envbuild and envrun create, replace or remove there goes through here, and
tests/test_architecture.py fails when a raw write, rename, unlink or rmtree appears anywhere else. The rules:

- A directory is opened once and worked in through its descriptor (`dir_fd`): a component swapped for a
  link after it was checked is never followed, because nothing is looked up by its path again.
- A link we did not make is never followed below a directory we hold (`O_NOFOLLOW` on every component we
  open); the path the user typed is theirs and is resolved as given.
- A new file gets an unpredictable name (`O_CREAT | O_EXCL | O_NOFOLLOW`, 0600) and is renamed over the
  target inside the same directory descriptor. A target that exists and is not a regular file (a device,
  a FIFO, `/dev/stdout`) is written in place, never replaced; `-` means standard output.
- Removal walks descriptors and never crosses a link: a link is removed, never its target.
- Owner and mode are judged on the descriptor (`fstat`), never on a path looked up again.

Imports only the standard library and the shared leaves `envbuild.shared.errors` and `envbuild.shared.treecopy`:
envrun's launch path uses it.
"""

from __future__ import annotations

import errno
import os
import stat
import sys

from envbuild.shared.errors import EnvbuildError
from envbuild.shared.treecopy import copy_tree_argv

TYPE_CHECKING = False  # typing is not imported on envrun's launch path (tests/test_architecture.py)
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_GROUP_OR_OTHER_WRITE = stat.S_IWGRP | stat.S_IWOTH


class UnsafePlaceError(EnvbuildError):
    """A directory or file in a place others may write is not what envbuild made: a link, a stranger's."""


def writable_by_others(info: os.stat_result) -> bool:
    """True when someone besides the owner may create, rename or remove names in a directory with this
    stat (a group or other write bit), or the directory is not the caller's (nor root's)."""
    return bool(info.st_mode & _GROUP_OR_OTHER_WRITE) or info.st_uid not in (os.geteuid(), 0)


def owned_by_stranger(info: os.stat_result, *, also: tuple[int, ...] = ()) -> bool:
    """True when the owner is neither the caller, nor root, nor one of `also`."""
    return info.st_uid not in (os.geteuid(), 0, *also)


# --- directories ------------------------------------------------------------------------------------------

def open_dir(path: str | os.PathLike[str], *, create: bool = False, mode: int = 0o777) -> int:
    """A descriptor of the directory `path` (close it), opened one component at a time. A link on the way is
    followed only when it is the user's own (or root's), or lies in a directory nobody else may write: the
    user's `/scratch -> /pfs/...` works, a link another member planted in a group directory at a name the
    user was about to use is refused (UnsafePlaceError). With `create`, each missing component is made (mkdir
    with `mode`, less the umask) and opened without following a link, so one planted meanwhile is refused."""
    path = os.fspath(path) or "."
    absolute = path.startswith("/")

    def open_one(fd: int, part: str, where: str) -> int:
        return _open_component(fd, part, create=create, mode=mode, where=where)

    return _descend(_open_dir_fd("/" if absolute else ".", 0), path, "/" if absolute else "", open_one)


def _descend(fd: int, relative: str, where: str, open_one: Callable[[int, str, str], int]) -> int:
    """The directory `relative` below the directory `fd` (consumed), each component opened by
    `open_one(parent_fd, name, its path)` and each parent closed once its child is open: one held at a time."""
    try:
        for part in relative.split("/"):
            if part in ("", "."):
                continue
            where = os.path.join(where, part)
            inner = open_one(fd, part, where)
            os.close(fd)
            fd = inner
        return fd
    except BaseException:
        os.close(fd)
        raise


def _open_component(fd: int, part: str, *, create: bool, mode: int, where: str) -> int:
    try:
        return _open_dir_fd(part, os.O_NOFOLLOW, dir_fd=fd)
    except FileNotFoundError:
        if not create:
            raise
        return subdir(fd, part, create=True, mode=mode, where=where)
    except OSError as exc:
        if exc.errno not in (errno.ELOOP, errno.ENOTDIR) or not _is_link(fd, part):
            raise
    link = os.stat(part, dir_fd=fd, follow_symlinks=False)
    if owned_by_stranger(link) and os.fstat(fd).st_mode & _GROUP_OR_OTHER_WRITE:
        raise UnsafePlaceError(
            f"{where} is a symbolic link made by uid {link.st_uid} (not you) in a directory others may write: "
            "envbuild never follows a link someone else planted in a shared place",
            f"check where it leads (ls -l {where}); remove it, or give the path it leads to")
    return _open_dir_fd(part, 0, dir_fd=fd)


def subdir(parent_fd: int, name: str, *, create: bool = False, mode: int = 0o777, where: str = "",
           also_trusted: tuple[int, ...] = ()) -> int:
    """A descriptor of the directory `name` in `parent_fd`, never through a link; with `create` it is made
    when missing. When the parent is writable by others, a subdirectory owned by a stranger (not the caller,
    root, or `also_trusted`) is refused: its owner could swap what we write there."""
    if create:
        make_dir_at(parent_fd, name, mode)
    fd = _open_subdir_nofollow(parent_fd, name, where=where or name)
    info = os.fstat(fd)
    if owned_by_stranger(info, also=also_trusted) and writable_by_others(os.fstat(parent_fd)):
        os.close(fd)
        raise _strangers_dir_error(where or name, info)
    return fd


def make_dir_at(parent_fd: int, name: str, mode: int = 0o777) -> bool:
    """mkdir `name` in the held directory `parent_fd` (`mode` less the umask); False when the name is there in
    any form (mkdir never follows a link planted at it)."""
    _check_name(name)
    try:
        os.mkdir(name, mode, dir_fd=parent_fd)
    except FileExistsError:
        return False
    return True


def make_dirs_at(dir_fd: int, relative: str, *, mode: int | None = None, where: str = "",
                 trusted: Callable[[os.stat_result], bool] | None = None, new: bool = False) -> int:
    """`mkdir -p relative` beneath the held directory `dir_fd` (a store's own directory, an output's directory
    the user named): each component made, or opened when there, without following a link, so a link another
    member planted at one of them is refused (UnsafePlaceError), never made or written through. So is a
    directory there whose owner `trusted` does not accept (default: subdir's rule, a stranger's in a directory
    others may write). `mode`: the exact permission bits of each directory this makes (None: 0777 less the
    umask); those already there keep theirs. `new`: the last directory must be made here (its name is the
    caller's own, a build's random one): one already there was made by someone else, and is refused. `where`:
    the path of `dir_fd`, for the messages. Returns the descriptor of the last directory (close it)."""
    last = os.path.join(where, *(part for part in relative.split("/") if part not in ("", ".")))

    def make_one(fd: int, part: str, where: str) -> int:
        made = make_dir_at(fd, part, 0o700 if mode is not None else 0o777)
        inner = _open_subdir_nofollow(fd, part, where=where)
        try:
            if new and not made and where == last:
                raise UnsafePlaceError(
                    f"{where} is already there, though its name is this build's own: someone else made it, and "
                    "could have put links in it where the build writes",
                    f"check who made it (ls -ld {where}); remove it, and run again")
            info = os.fstat(inner)
            if not (trusted(info) if trusted is not None
                    else not (owned_by_stranger(info) and writable_by_others(os.fstat(fd)))):
                raise _strangers_dir_error(where, info)
            if made and mode is not None:
                os.fchmod(inner, mode)  # exactly `mode`: made 0700 first, so nobody else ever saw it open
        except BaseException:
            os.close(inner)
            raise
        return inner

    return _descend(os.dup(dir_fd), relative, where, make_one)


def _open_subdir_nofollow(parent_fd: int, name: str, *, where: str) -> int:
    _check_name(name)
    try:
        return _open_dir_fd(name, os.O_NOFOLLOW, dir_fd=parent_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            kind = "a symbolic link" if _is_link(parent_fd, name) else "not a directory"
            raise UnsafePlaceError(
                f"{where} is {kind}: envbuild never follows a link it did not make in a place others may write",
                f"check who made it (ls -l {where}) and remove it; envbuild makes the directory again") from None
        raise


def _strangers_dir_error(where: str, info: os.stat_result) -> UnsafePlaceError:
    return UnsafePlaceError(
        f"{where} belongs to another user (uid {info.st_uid}) in a directory others may write: "
        "what is written there could be swapped",
        f"check who made it (ls -ld {where}); remove it, or ask its owner to, and run again")


def _open_dir_fd(path: str, extra: int, *, dir_fd: int | None = None) -> int:
    """os.open of a directory; one the caller may only pass through (mode 0711: no read) is opened O_PATH,
    which serves every *at call by name, fstat included (listing it needs read permission anyway)."""
    try:
        return os.open(path, _DIR_FLAGS | extra, dir_fd=dir_fd)
    except PermissionError:
        return os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC | extra, dir_fd=dir_fd)


def _is_link(parent_fd: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=parent_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _check_name(name: str) -> None:
    if not name or "/" in name or name in (".", ".."):
        raise ValueError(f"not a single path component: {name!r}")


def make_dirs(path: str | os.PathLike[str], *, mode: int = 0o777) -> None:
    """`mkdir -p path`, each new component opened without following a link (see open_dir)."""
    os.close(open_dir(path, create=True, mode=mode))


def open_below(base: str | os.PathLike[str], parts: tuple[str, ...] | list[str], *, create: bool = False,
               mode: int = 0o777) -> int:
    """A descriptor of `base/part/...`: `base` is the user's path, resolved as given; each of `parts` (the
    directories envbuild itself names there, such as `.envrun/jobs`) is opened with subdir, so a link or a
    stranger's directory planted at one of them is refused."""
    fd = open_dir(base, create=create, mode=mode)
    where = os.fspath(base)
    for part in parts:
        where = os.path.join(where, part)
        try:
            inner = subdir(fd, part, create=create, mode=mode, where=where)
        finally:
            os.close(fd)
        fd = inner
    return fd


# --- writing ----------------------------------------------------------------------------------------------

def write_file(path: str | os.PathLike[str], data: bytes | str, *, mode: int | None = None,
               dir_fd: int | None = None) -> None:
    """Write `data` (text as UTF-8) to `path` so that a reader sees the old content or the new, never half.

    `-` is standard output. A target that is a device, a FIFO or a socket (`/dev/null`, `/dev/stdout`
    through its link in a directory only root may write) is written in place, never replaced. Otherwise a
    new file with an unpredictable name is made beside it (`O_EXCL | O_NOFOLLOW`) and renamed over it within
    the directory's descriptor, so a link planted at the target is replaced, never written through, and a
    hard link into a store layer is replaced too. `mode`: the new file's permission bits (default: 0666 less
    the umask). `dir_fd`: `path` is a name in that directory."""
    payload = data.encode("utf-8") if isinstance(data, str) else data
    path = os.fspath(path)
    if path == "-" and dir_fd is None:
        sys.stdout.flush()
        _write_all(sys.stdout.fileno(), payload)
        return
    if dir_fd is None:
        directory, name = os.path.split(path)
        fd = open_dir(directory or ".")
        try:
            _write_in(fd, name, payload, mode, where=path)
        finally:
            os.close(fd)
    else:
        _write_in(dir_fd, path, payload, mode, where=path)


def atomic_write(path: str | os.PathLike[str], data: bytes | str, *, mode: int | None = None) -> None:
    """write_file under the name most callers know it by."""
    write_file(path, data, mode=mode)


def _write_in(dir_fd: int, name: str, payload: bytes, mode: int | None, *, where: str) -> None:
    _check_name(name)
    try:
        info: os.stat_result | None = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        info = None
    if info is not None and stat.S_ISDIR(info.st_mode):
        raise EnvbuildError(f"{where} is a directory", "give a file name, not a directory")
    if info is not None and stat.S_ISLNK(info.st_mode) and not writable_by_others(os.fstat(dir_fd)):
        # A link in a directory only the caller (or root) may write is the user's own (/dev/stdout): follow it
        # to see whether it names a device or a FIFO, to be written in place.
        try:
            fd = os.open(name, os.O_WRONLY | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=dir_fd)
        except OSError:
            fd = -1
        if fd >= 0:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                _write_then_close(fd, payload)
                return
            os.close(fd)
    elif info is not None and not stat.S_ISREG(info.st_mode) and not stat.S_ISLNK(info.st_mode):
        fd = os.open(name, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
        _write_then_close(fd, payload)
        return
    def fill(fd: int) -> None:
        _write_all(fd, payload)
        os.fchmod(fd, (0o666 & ~current_umask()) if mode is None else mode)

    replace_with_new_file(dir_fd, name, fill)


def replace_with_new_file(dir_fd: int, name: str, fill: Callable[[int], None]) -> None:
    """Fill a new file with an unpredictable name beside `name` (O_EXCL, never through a link), then rename it
    over `name` within the directory's descriptor. A failed fill leaves nothing behind and the old file, if any,
    untouched."""
    partial = f".{name}.{os.urandom(6).hex()}.partial"  # secrets.token_hex without importing secrets (hmac, random)
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
    try:
        try:
            fill(fd)
        finally:
            os.close(fd)
        os.rename(partial, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        try:
            os.unlink(partial, dir_fd=dir_fd)
        except OSError:
            pass
        raise


def _write_then_close(fd: int, payload: bytes) -> None:
    try:
        if os.get_blocking(fd) is False and stat.S_ISFIFO(os.fstat(fd).st_mode):
            os.set_blocking(fd, True)
        _write_all(fd, payload)
    finally:
        os.close(fd)


def _write_all(fd: int, payload: bytes) -> None:
    view = memoryview(payload)
    while view:
        view = view[os.write(fd, view):]


def create_new(dir_fd: int, name: str, data: bytes | str, *, mode: int = 0o600) -> None:
    """Create `name` in `dir_fd` with `data`; fails (FileExistsError) when the name exists in any form."""
    _check_name(name)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=dir_fd)
    try:
        _write_all(fd, payload)
        os.fchmod(fd, mode)
    finally:
        os.close(fd)


def copy_file(src: str | os.PathLike[str], dest: str | os.PathLike[str], *, mode: int | None = None) -> None:
    """Copy the regular file `src` to `dest` as write_file writes: a new file with an unpredictable name
    beside `dest`, renamed over it within its directory's descriptor (a hard link at `dest` is replaced, a
    link planted there is never written through). `mode`: the copy's permission bits (default: the
    source's). The data moves in the kernel (copy_file_range, reflinks where the file system has them)."""
    directory, name = os.path.split(os.fspath(dest))
    _check_name(name)
    dir_fd = open_dir(directory or ".")
    try:
        source = os.open(src, os.O_RDONLY | os.O_CLOEXEC)
        try:
            info = os.fstat(source)

            def fill(out: int) -> None:
                _copy_data(source, out, info.st_size)
                os.fchmod(out, stat.S_IMODE(info.st_mode) if mode is None else mode)
                os.utime(out, ns=(info.st_atime_ns, info.st_mtime_ns))

            replace_with_new_file(dir_fd, name, fill)
        finally:
            os.close(source)
    finally:
        os.close(dir_fd)


def may_link_files_of(tree: str | os.PathLike[str]) -> bool:
    """Whether this user may hard-link the files of `tree` (a store entry: one owner for all its files). The
    kernel's fs.protected_hardlinks (on by default) refuses a link to a file one neither owns nor may read and
    write, so in a group store an entry another member made is copied, not linked; root links anything."""
    if os.geteuid() == 0:
        return True
    try:
        return os.stat(tree).st_uid == os.geteuid()
    except OSError:
        return True  # the copy says what is wrong with it


def linked_copy_argv(src: str, dest: str) -> tuple[str, ...]:
    """A hard-linked copy of the tree `src` where this user may link its files, else a full copy: what runs
    wherever a build asks for a linked copy of a store tree."""
    return copy_tree_argv(src, dest, linked=may_link_files_of(src))


def link_or_copy(src: str | os.PathLike[str], dest: str | os.PathLike[str]) -> None:
    """`dest` (a new name in a directory of this build's own) as a hard link to the regular file `src`, or a
    copy of it (copy_file) where the kernel refuses the link: another user's file, another file system."""
    try:
        os.link(src, dest, follow_symlinks=False)
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.EACCES, errno.EXDEV, errno.EMLINK):
            raise
        copy_file(src, dest)


def _copy_data(source: int, out: int, size: int) -> None:
    left = size
    try:
        while left > 0:
            done = os.copy_file_range(source, out, min(left, 1 << 30))
            if done == 0:
                break
            left -= done
    except OSError as exc:
        if exc.errno not in (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
            raise
    while True:  # what copy_file_range did not do (another file system, an older kernel)
        chunk = os.read(source, 1 << 20)
        if not chunk:
            break
        _write_all(out, chunk)


def open_append(path: str | os.PathLike[str], *, mode: int = 0o666) -> int:
    """A descriptor to append to the log `path`, never through a link planted at it (O_NOFOLLOW) and never
    to a device or FIFO someone put there: such a name is refused."""
    directory, name = os.path.split(os.fspath(path))
    _check_name(name)
    dir_fd = open_dir(directory or ".")
    try:
        try:
            fd = os.open(name, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK,
                         mode, dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise UnsafePlaceError(f"{os.fspath(path)} is a symbolic link: a log is never written through one",
                                       f"remove the link (ls -l {os.fspath(path)}) and run again") from None
            raise
    finally:
        os.close(dir_fd)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise UnsafePlaceError(f"{os.fspath(path)} is not a regular file", "remove it and run again")
    os.set_blocking(fd, True)
    return fd


def open_append_at(dir_fd: int, name: str, *, mode: int = 0o600) -> int:
    """open_append of the name `name` in the held directory `dir_fd` (a log in a directory opened with
    open_below): never through a link, never a device or FIFO."""
    _check_name(name)
    try:
        fd = os.open(name, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK,
                     mode, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafePlaceError(f"{name} is a symbolic link: a log is never written through one",
                                   f"remove the link (ls -l {name}) and run again") from None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise UnsafePlaceError(f"{name} is not a regular file", "remove it and run again")
    os.set_blocking(fd, True)
    return fd


def open_lock_at(dir_fd: int, name: str, *, mode: int = 0o666, where: str = "") -> int:
    """A descriptor to flock the lock file `name` in the held directory `dir_fd` (a store's locks/), made when
    missing (`mode` less the umask: a group store's members must all lock it), read-write where the caller may
    write it, else read-only (flock works on either). Never through a link (O_NOFOLLOW), never a FIFO, device
    or a hard link to a file elsewhere (its holder line would be written over that file): refused with
    UnsafePlaceError. Other failures are the OSError."""
    _check_name(name)
    where = where or name
    flags = os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
    try:
        try:
            fd = os.open(name, os.O_RDWR | os.O_CREAT | flags, mode, dir_fd=dir_fd)
        except PermissionError:
            fd = os.open(name, os.O_RDONLY | flags, dir_fd=dir_fd)  # another member's lock file
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafePlaceError(f"the lock file {where} is a symbolic link: envbuild never writes through a link "
                                   "in a place others may write",
                                   f"check who made it (ls -l {where}) and remove it; envbuild makes it again") from None
        raise
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
        os.close(fd)
        what = "not a regular file" if not stat.S_ISREG(info.st_mode) else "a hard link to another file"
        raise UnsafePlaceError(f"the lock file {where} is not one envbuild made ({what})",
                               f"check who made it (ls -l {where}) and remove it; envbuild makes it again")
    return fd


def set_mode(path: str | os.PathLike[str], mode: int) -> None:
    """chmod `path` (a file or directory just made, such as a copied directory output) through a descriptor of
    the very entry, never through a link planted at its name: that is refused (UnsafePlaceError), as chmod
    would change the mode of whatever the link points at."""
    where = os.fspath(path).rstrip("/") or "/"
    directory, name = os.path.split(where)
    dir_fd = open_dir(directory or ".")
    try:
        _check_name(name)
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
        except PermissionError:  # not readable (a directory 0311): its descriptor only names it
            fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafePlaceError(f"{where} is a symbolic link: envbuild never changes a mode through one",
                                   f"check who made it (ls -l {where}) and remove it; run again") from None
        raise
    finally:
        os.close(dir_fd)
    try:
        if stat.S_ISLNK(os.fstat(fd).st_mode):  # O_PATH | O_NOFOLLOW opens a link itself
            raise UnsafePlaceError(f"{where} is a symbolic link: envbuild never changes a mode through one",
                                   f"check who made it (ls -l {where}) and remove it; run again")
        try:
            os.fchmod(fd, mode)
        except OSError as exc:
            if exc.errno != errno.EBADF:
                raise
            os.chmod(f"/proc/self/fd/{fd}", mode)  # an O_PATH descriptor: the entry it names, not a link
    finally:
        os.close(fd)


def touch(path: str | os.PathLike[str]) -> None:
    """Make the empty file `path` if it is not there (a marker); an existing name, in any form, is kept."""
    directory, name = os.path.split(os.fspath(path))
    dir_fd = open_dir(directory or ".")
    try:
        create_new(dir_fd, name, b"", mode=0o666 & ~current_umask())
    except FileExistsError:
        pass
    finally:
        os.close(dir_fd)


def rename_path(src: str | os.PathLike[str], dest: str | os.PathLike[str]) -> None:
    """os.replace(src, dest) with each name looked up in its directory's descriptor."""
    src_dir, src_name = os.path.split(os.fspath(src))
    dest_dir, dest_name = os.path.split(os.fspath(dest))
    src_fd = open_dir(src_dir or ".")
    try:
        dest_fd = open_dir(dest_dir or ".")
        try:
            rename_at(src_fd, src_name, dest_fd, dest_name)
        finally:
            os.close(dest_fd)
    finally:
        os.close(src_fd)


_umask: int | None = None


def current_umask() -> int:
    """The process's umask, read without changing it (from /proc where the kernel shows it)."""
    global _umask
    if _umask is None:
        try:
            with open("/proc/self/status", encoding="ascii") as status:
                for line in status:
                    if line.startswith("Umask:"):
                        _umask = int(line.split()[1], 8)
                        break
        except (OSError, ValueError):
            pass
        if _umask is None:
            _umask = os.umask(0o022)
            os.umask(_umask)
    return _umask


# --- reading ----------------------------------------------------------------------------------------------

def read_file_nofollow(dir_fd: int, name: str, *, limit: int = 16 << 20) -> tuple[bytes, os.stat_result]:
    """The bytes of the regular file `name` in `dir_fd` (never through a link) and the stat of the very
    file read, so that what is judged (owner, mode) is what is read."""
    _check_name(name)
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=dir_fd)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise EnvbuildError(f"{name} is not a regular file", "replace it with a file")
        chunks = []
        total = 0
        while total <= limit:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > limit:
            raise EnvbuildError(f"{name} is larger than {limit} bytes", "it is not a file envbuild wrote")
        return b"".join(chunks), info
    finally:
        os.close(fd)


# --- removing ---------------------------------------------------------------------------------------------

def remove_file(path: str | os.PathLike[str], *, missing_ok: bool = True) -> None:
    """Remove the name `path` (a link is removed itself, never its target). With `missing_ok`, a directory
    on the way that is not there means the name is not there either (`--log logs/x.log` before logs/ exists)."""
    directory, name = os.path.split(os.fspath(path))
    _remove_in(directory, lambda fd: unlink_at(fd, name, missing_ok=missing_ok), missing_ok=missing_ok)


def _remove_in(directory: str, remove: Callable[[int], None], *, missing_ok: bool) -> None:
    """remove(the descriptor of `directory`); with `missing_ok`, a directory that is not there (or one on its
    way) means that what was to be removed is not there either."""
    try:
        fd = open_dir(directory or ".")
    except FileNotFoundError:
        if missing_ok:
            return
        raise
    try:
        remove(fd)
    finally:
        os.close(fd)


def unlink_at(dir_fd: int, name: str, *, missing_ok: bool = True) -> None:
    _check_name(name)
    try:
        os.unlink(name, dir_fd=dir_fd)
    except FileNotFoundError:
        if not missing_ok:
            raise


def rename_at(src_dir_fd: int, src: str, dst_dir_fd: int, dst: str) -> None:
    """Rename within or between two held directories (neither name is looked up through a path)."""
    _check_name(src)
    _check_name(dst)
    os.rename(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)


def remove_tree(path: str | os.PathLike[str], *, missing_ok: bool = True) -> None:
    """`rm -rf path` that never crosses a link: the last component, if a link, is removed itself; every
    directory below is opened with O_NOFOLLOW relative to its parent. Directories of ours without write
    permission (read-only trees from some packages) are made writable first."""
    directory, name = os.path.split(os.fspath(path).rstrip("/"))
    _remove_in(directory, lambda fd: remove_tree_at(fd, name, missing_ok=missing_ok), missing_ok=missing_ok)


def remove_tree_at(parent_fd: int, name: str, *, missing_ok: bool = True) -> None:
    """remove_tree of the entry `name` in the directory `parent_fd`."""
    _check_name(name)
    try:
        fd = _open_dir_or_unlink(parent_fd, name)
    except FileNotFoundError:
        if missing_ok:
            return
        raise
    if fd is None:
        return
    try:
        empty_dir(fd)
    finally:
        os.close(fd)
    try:
        os.rmdir(name, dir_fd=parent_fd)
    except FileNotFoundError:
        if not missing_ok:
            raise


def _open_dir_or_unlink(parent_fd: int, name: str) -> int | None:
    """The directory `name` of `parent_fd`, opened without following a link; None when `name` is anything else,
    which is then removed (a link swapped in after the stat included). FileNotFoundError when it is gone."""
    info = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
    if not stat.S_ISDIR(info.st_mode):
        unlink_at(parent_fd, name)
        return None
    try:
        return os.open(name, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=parent_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):  # swapped for a link since the stat: remove the link
            unlink_at(parent_fd, name)
            return None
        raise


def empty_dir(fd: int) -> None:
    """Remove everything inside the directory `fd`, never crossing a link. Iterative, one descriptor held per
    level: a tree someone made thousands of levels deep ends in a clear error, never a RecursionError."""
    _ensure_writable(fd)
    # Each level: its descriptor, its name in the level above (None for `fd` itself), the names left to remove.
    levels: list[tuple[int, str | None, list[str]]] = [(fd, None, list_names(fd))]
    try:
        while levels:
            here, _, names = levels[-1]
            if not names:
                _, name, _ = levels.pop()
                if name is not None:
                    os.close(here)
                    try:
                        os.rmdir(name, dir_fd=levels[-1][0])
                    except FileNotFoundError:
                        pass
                continue
            name = names.pop()
            try:
                inner = _open_dir_or_unlink(here, name)
            except FileNotFoundError:
                continue
            except OSError as exc:
                if exc.errno == errno.EMFILE:
                    raise EnvbuildError(
                        f"a directory tree {len(levels)} levels deep is too deep to remove here (no descriptor left)",
                        "remove it by hand (rm -rf), after checking who made it") from None
                raise
            if inner is None:
                continue
            levels.append((inner, name, []))
            _ensure_writable(inner)
            levels[-1][2].extend(list_names(inner))
    finally:
        for here, name, _ in levels:
            if name is not None:
                os.close(here)


def list_names(fd: int) -> list[str]:
    """The names in the directory `fd` (its descriptor is not consumed)."""
    with os.scandir(fd) as entries:
        return [entry.name for entry in entries]


def iter_subdirs(fd: int) -> Iterator[tuple[str, os.stat_result]]:
    """(name, lstat) of the real directories in `fd`; links and other files are skipped."""
    for name in list_names(fd):
        try:
            info = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            continue
        if stat.S_ISDIR(info.st_mode):
            yield name, info


def tree_usage(fd: int) -> int:
    """Bytes of the blocks used below the directory `fd`, never crossing a link."""
    total = 0
    for name in list_names(fd):
        try:
            info = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except OSError:
            continue
        total += info.st_blocks * 512
        if stat.S_ISDIR(info.st_mode):
            try:
                sub = os.open(name, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=fd)
            except OSError:
                continue
            try:
                total += tree_usage(sub)
            finally:
                os.close(sub)
    return total


def _ensure_writable(fd: int) -> None:
    info = os.fstat(fd)
    if info.st_uid == os.geteuid() and info.st_mode & stat.S_IRWXU != stat.S_IRWXU:
        os.fchmod(fd, stat.S_IMODE(info.st_mode) | stat.S_IRWXU)
