"""Content digests of what goes into an image: a file (a local .sif base) or a whole tree (an unpacked
base root filesystem), as "sha256:<hex>".

A tree digest covers each entry's relative path, type, permission bits, owner, symlink target and file
content, in sorted order, and leaves out times: two unpacks of the same base give the same digest.

Recording the digest of a tree that shares most files with one digested before (a +1 env layer hard-links
its parent's 46,000 files) need not read them again: the per-file digests of the earlier tree, kept beside
its record (`write_file_digests`), are reused for a file with the same inode, size and modification time (a
hard link: the same file; as envbuild.sif.manifest decides what a --layered build squashes). Only
recording does this; verifying a tree always reads every file.
"""

from __future__ import annotations

import hashlib
import os
import stat
import struct
from collections.abc import Iterator, Mapping

_CHUNK = 1 << 20
# A per-file digest: inode, size, modification time (ns), sha256. Fixed-size records: any bytes read back are
# numbers and digests, never anything else.
_FILE_DIGEST = struct.Struct("<QQq32s")
FileKey = tuple[int, int, int]


def file_digest(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return "sha256:" + digest.hexdigest()


def tree_digest(root: str, *, known: Mapping[FileKey, str] | None = None, found: dict[FileKey, str] | None = None) -> str:
    """`known`: file digests to reuse by (inode, size, mtime) (read_file_digests); `found`: filled with every
    regular file's digest by that key, for write_file_digests."""
    digest = hashlib.sha256()
    for relative, info in _walk_sorted(root, ""):
        kind = stat.S_IFMT(info.st_mode)
        header = f"{relative}\0{kind:o}\0{stat.S_IMODE(info.st_mode):o}\0{info.st_uid}\0{info.st_gid}\0"
        digest.update(header.encode("utf-8", "surrogateescape"))
        path = os.path.join(root, relative)
        if stat.S_ISLNK(info.st_mode):
            digest.update(os.readlink(path).encode("utf-8", "surrogateescape"))
        elif stat.S_ISREG(info.st_mode):
            key = (info.st_ino, info.st_size, info.st_mtime_ns)
            content = (known.get(key) if known else None) or file_digest(path)
            if found is not None:
                found[key] = content
            digest.update(content.encode())
        elif stat.S_ISCHR(info.st_mode) or stat.S_ISBLK(info.st_mode):
            digest.update(f"{os.major(info.st_rdev)}:{os.minor(info.st_rdev)}".encode())
        digest.update(b"\n")
    return "sha256:" + digest.hexdigest()


def _walk_sorted(root: str, prefix: str) -> Iterator[tuple[str, os.stat_result]]:
    with os.scandir(os.path.join(root, prefix) if prefix else root) as entries:
        ordered = sorted(entries, key=lambda e: e.name)
    for entry in ordered:
        relative = f"{prefix}/{entry.name}" if prefix else entry.name
        info = entry.stat(follow_symlinks=False)
        yield relative, info
        if stat.S_ISDIR(info.st_mode):
            yield from _walk_sorted(root, relative)


def write_file_digests(path: str, found: Mapping[FileKey, str]) -> None:
    from envbuild.shared.safefiles import atomic_write

    atomic_write(path, b"".join(_FILE_DIGEST.pack(ino, size, mtime, bytes.fromhex(value[7:]))
                                for (ino, size, mtime), value in found.items()), mode=0o644)


def read_file_digests(path: str | None) -> dict[FileKey, str]:
    """The per-file digests write_file_digests wrote; none when the file is missing, unreadable or not whole."""
    try:
        with open(path or "", "rb") as handle:
            data = handle.read()
    except OSError:
        return {}
    if len(data) % _FILE_DIGEST.size:
        return {}
    return {(ino, size, mtime): "sha256:" + raw.hex() for ino, size, mtime, raw in _FILE_DIGEST.iter_unpack(data)}


def main(argv: list[str] | None = None) -> int:
    """`python -m envbuild.shared.treedigest PATH OUT [KNOWN [FILES-OUT]]`: write PATH's digest (file or tree) to OUT;
    for a tree, reusing the per-file digests in KNOWN and writing its own to FILES-OUT ("" for none)."""
    import sys

    from envbuild.shared.safefiles import atomic_write

    path, out, known, files_out = [*(argv if argv is not None else sys.argv[1:]), "", ""][:4]
    if os.path.isdir(path):
        found: dict[FileKey, str] = {}
        value = tree_digest(path, known=read_file_digests(known) if known else None, found=found)
        if files_out:
            write_file_digests(files_out, found)
    else:
        value = file_digest(path)
    atomic_write(out, value + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
