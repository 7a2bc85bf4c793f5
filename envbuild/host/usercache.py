"""envrun's own cache: what its start-up would otherwise recompute on every launch (validated recipes and
config files, overlay records, image digests), one home for every such file.

The cache is the user's alone. It lives in $XDG_CACHE_HOME/envrun (else ~/.cache/envrun), never in
$ENVBUILD_CACHE_DIR: that is a build store a project's group may share, and whoever can write a cached
recipe or config decides the binds and variables of the next launch that reads it. The directory is made
0700 and every file written 0600. A file is read only when it and its directory belong to the user
and nobody else may write them; otherwise, or when it does not load as the plain data its caller
expects, it is a miss: the caller recomputes the value from the real file and writes the cache again
(where the directory is the user's own, it is closed first). So a tampered, foreign or corrupt cache
file costs time, never code or settings.

The files are `marshal` data (no import, unlike json's `re`; Python's version is in every caller's key),
and only plain data is accepted back: dict with str keys, list, tuple, str, int, float, bool, None.
marshal can also make code objects, bytes or sets; a file holding one is a miss. Each file stores its
key next to its value, and a value read back under another key (a renamed file) is a miss too.

Light on purpose: os, sys, zlib and marshal only (envrun's start-up path); the mode bits are tested without `stat`.
"""

from __future__ import annotations

import marshal
import os
import sys
import zlib

from envbuild import __version__

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from typing import Any, TypeVar

    Value = TypeVar("Value")

DIR_MODE = 0o700
FILE_MODE = 0o600
_OTHERS_WRITE = 0o022  # group or others may write
_PLAIN_SCALARS = frozenset((str, int, float, bool, type(None)))
_READ_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0)
_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)
_LIMIT = 16 << 20  # no cached value is near this; a bigger file is not ours


class _Miss:
    __slots__ = ()

    def __repr__(self) -> str:
        return "MISS"


MISS = _Miss()  # what read_cached returns when nothing usable is stored (None is a value that can be cached)


def user_cache_dir(environ: Mapping[str, str] | None = None) -> str:
    """$XDG_CACHE_HOME/envrun (an absolute XDG_CACHE_HOME only, as the XDG spec says), else ~/.cache/envrun."""
    environ = os.environ if environ is None else environ
    base = environ.get("XDG_CACHE_HOME") or ""
    if not os.path.isabs(base):
        base = os.path.join(environ.get("HOME") or os.path.expanduser("~"), ".cache")
    return os.path.join(base, "envrun")


def content_cache_name(kind: str, content: bytes, cache_format: int | str) -> str:
    """The cache file name of a value made from a file's `content` (a recipe, a config file): `kind`, a crc32 and
    the size of the content, and a crc32 of envbuild's version, the caller's cache format and Python's version
    (marshal's format is Python's). crc32 rather than sha256: the name only has to notice an edited file, and
    hashlib's import would cost envrun milliseconds; the size and the stamp make reuse of a stale entry
    practically impossible."""
    stamp = f"{__version__}/{cache_format}/{sys.version_info[0]}.{sys.version_info[1]}".encode()
    return f"{kind}-{zlib.crc32(content):08x}{len(content):x}-{zlib.crc32(stamp):08x}.marshal"


def read_cached(name: str, key: str, check: Callable[[Any], bool] | None = None) -> Any:
    """The value stored as `name` under `key`, when the file is the user's own and private and holds plain
    data that `check` accepts; MISS otherwise."""
    try:
        directory = os.open(user_cache_dir(), _DIR_FLAGS)
    except OSError:
        return MISS
    try:
        data = _read_private(name, directory)
    finally:
        os.close(directory)
    if data is None:
        return MISS
    try:
        stored = marshal.loads(data)  # noqa: S302 - the user's own private file, and checked below
    except (ValueError, EOFError, TypeError):
        return MISS
    if type(stored) is not tuple or len(stored) != 2 or stored[0] != key or not is_plain(stored[1]):
        return MISS
    value = stored[1]
    try:
        return value if check is None or check(value) else MISS
    except (AttributeError, KeyError, TypeError, ValueError, IndexError):
        return MISS


def write_cached(name: str, key: str, value: Any) -> None:
    """Store `value` (plain data) as `name` under `key`: written 0600 beside the others and renamed into
    place, in a 0700 directory. Best effort: an unwritable cache only costs speed. A directory that is not
    the user's is never written into; the user's own one that others may write is closed first."""
    write_cached_many([(name, key, value)])


def write_cached_many(entries: Sequence[tuple[str, str, Any]]) -> None:
    """write_cached of each (name, key, value), the directory opened and checked once for all of them."""
    payloads = []
    for name, key, value in entries:
        try:
            payloads.append((name, marshal.dumps((key, value))))
        except ValueError:
            continue
    _write_files(payloads)


def write_cached_bytes(name: str, data: bytes) -> None:
    """Store `data` as `name` as it is, for a reader other than read_cached (envbuild/launch/repeatlaunch.c,
    which checks the file as _read_private does): same place, modes and care as write_cached."""
    _write_files([(name, data)])


def _write_files(payloads: Sequence[tuple[str, bytes]]) -> None:
    if not payloads:
        return
    from envbuild.shared import safefiles  # a cache miss only: not on every launch

    parent, cache_name = os.path.split(user_cache_dir())
    try:
        # Its parents (~/.cache) made as safefiles makes directories: never through a link someone else planted.
        parent_fd = safefiles.open_dir(parent, create=True)
    except (OSError, safefiles.UnsafePlaceError):
        return
    try:
        safefiles.make_dir_at(parent_fd, cache_name, DIR_MODE)
        directory = os.open(cache_name, _DIR_FLAGS, dir_fd=parent_fd)  # the user's own link is followed: judged below
    except OSError:
        return
    finally:
        os.close(parent_fd)
    try:
        status = os.fstat(directory)
        if status.st_uid != os.geteuid():
            return
        if status.st_mode & 0o777 != DIR_MODE:
            os.fchmod(directory, DIR_MODE)
        for name, data in payloads:
            try:
                safefiles.replace_with_new_file(directory, name, _filler(data))
            except OSError:
                pass
    except OSError:
        pass
    finally:
        os.close(directory)


def _filler(data: bytes) -> Callable[[int], None]:
    def fill(handle: int) -> None:
        os.fchmod(handle, FILE_MODE)  # exactly 0600, whatever the umask took away
        view = memoryview(data)
        while view:
            view = view[os.write(handle, view):]

    return fill


# Bump when what is kept per file changes (an overlay's record as read, an image digest's form, a runscript verdict).
PER_FILE_FORMAT = 2


def cached_per_file(path: str, kind: str, compute: Callable[[str], Value], check: Callable[[Any], bool]) -> Value:
    """compute(path), kept in this cache per (absolute path, size, mtime_ns) when it is plain data; `kind` starts
    the cache file's name (what is kept: "records", "digests", "runscripts-1"). The file name is a crc32 of that
    key (zlib is imported already; hashlib is not, and costs a launch); the key is stored with the value and
    compared on reading, and `check` (value -> bool) must accept what is read back."""
    status = os.stat(path)
    key = f"{PER_FILE_FORMAT}\0{os.path.abspath(path)}\0{status.st_size}\0{status.st_mtime_ns}"
    name = f"{kind}-{zlib.crc32(key.encode()):08x}{len(key):x}.marshal"
    stored = read_cached(name, key, check)
    if stored is not MISS:
        found: Value = stored  # plain data that `check` accepted
        return found
    value = compute(path)
    write_cached(name, key, value)
    return value


def is_plain(value: Any) -> bool:
    """Whether `value` is plain data only (dict with str keys, list, tuple, str, int, float, bool, None),
    however deeply nested: nothing marshal can also make (code, bytes, sets) hides in it."""
    pending = [value]
    while pending:
        item = pending.pop()
        kind = type(item)
        if kind is dict:
            for item_key, item_value in item.items():
                if type(item_key) is not str:
                    return False
                pending.append(item_value)
        elif kind is list or kind is tuple:
            pending.extend(item)
        elif kind not in _PLAIN_SCALARS:
            return False
    return True


def is_text_list(value: Any) -> bool:
    """A list (or tuple) of str: binds, overlays."""
    return (type(value) is list or type(value) is tuple) and all(type(item) is str for item in value)


def _private(status: os.stat_result, *, directory: bool) -> bool:
    """The user's own directory or regular file, which nobody else may write."""
    kind = status.st_mode & 0o170000
    if kind != (0o040000 if directory else 0o100000):
        return False
    return status.st_uid == os.geteuid() and not status.st_mode & _OTHERS_WRITE


def _read_private(name: str, directory: int) -> bytes | None:
    """The bytes of `name` in `directory`, when both are the user's own and nobody else may write them."""
    try:
        if not _private(os.fstat(directory), directory=True):
            return None
        handle = os.open(name, _READ_FLAGS, dir_fd=directory)
    except OSError:
        return None
    try:
        status = os.fstat(handle)
        if not _private(status, directory=False) or status.st_size > _LIMIT:
            return None
        return _read_all(handle, status.st_size)
    except OSError:
        return None
    finally:
        os.close(handle)


def _read_all(handle: int, size: int) -> bytes:
    chunks: list[bytes] = []
    left = size + 1  # one byte more: a file that grew is read to its end
    while True:
        chunk = os.read(handle, max(left, 1 << 16))
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        left -= len(chunk)
