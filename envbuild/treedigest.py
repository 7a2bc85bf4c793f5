"""Content digests of what goes into an image: a file (a local .sif base) or a whole tree (an unpacked
base root filesystem), as "sha256:<hex>".

A tree digest covers each entry's relative path, type, permission bits, owner, symlink target and file
content, in sorted order, and leaves out times: two unpacks of the same base give the same digest.
"""

from __future__ import annotations

import hashlib
import os
import stat

_CHUNK = 1 << 20


def file_digest(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return "sha256:" + digest.hexdigest()


def tree_digest(root: str) -> str:
    digest = hashlib.sha256()
    for relative, info in _walk_sorted(root, ""):
        kind = stat.S_IFMT(info.st_mode)
        header = f"{relative}\0{kind:o}\0{stat.S_IMODE(info.st_mode):o}\0{info.st_uid}\0{info.st_gid}\0"
        digest.update(header.encode("utf-8", "surrogateescape"))
        path = os.path.join(root, relative)
        if stat.S_ISLNK(info.st_mode):
            digest.update(os.readlink(path).encode("utf-8", "surrogateescape"))
        elif stat.S_ISREG(info.st_mode):
            digest.update(file_digest(path).encode())
        elif stat.S_ISCHR(info.st_mode) or stat.S_ISBLK(info.st_mode):
            digest.update(f"{os.major(info.st_rdev)}:{os.minor(info.st_rdev)}".encode())
        digest.update(b"\n")
    return "sha256:" + digest.hexdigest()


def _walk_sorted(root: str, prefix: str):
    with os.scandir(os.path.join(root, prefix) if prefix else root) as entries:
        ordered = sorted(entries, key=lambda e: e.name)
    for entry in ordered:
        relative = f"{prefix}/{entry.name}" if prefix else entry.name
        info = entry.stat(follow_symlinks=False)
        yield relative, info
        if stat.S_ISDIR(info.st_mode):
            yield from _walk_sorted(root, relative)


def main(argv: list[str] | None = None) -> int:
    """`python -m envbuild.treedigest PATH OUT`: write PATH's digest (file or tree) to OUT."""
    import sys

    from envbuild.atomicfile import atomic_write

    path, out = (argv if argv is not None else sys.argv[1:])[:2]
    value = tree_digest(path) if os.path.isdir(path) else file_digest(path)
    atomic_write(out, value + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
