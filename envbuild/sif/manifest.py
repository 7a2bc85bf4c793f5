"""What a squashed image tree held, file by file, and what a new tree changes against it.

A full build records the manifest of the sandbox it squashed next to the image in the store
(`tree-manifest.json.gz`). A later build that only adds a package (or changes the user layer) can then
squash just the difference (envbuild.sif.layeredwriter): the paths that are new or changed, and an
overlayfs whiteout for each path that went away.

Whether a file is unchanged is decided without reading the 1.3 GB tree where possible: the sandbox and
its env layers share unchanged files by hard links, so the same inode (with the same size, mode,
owner and time) is the same content; env layers are guarded against writes through shared files
(GuardTree). Files not shared (the user layer's, and every file when SOURCE_DATE_EPOCH makes the
sandbox a real copy) carry a sha256 in the manifest and are compared by it.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import stat
import sys
from dataclasses import dataclass

from envbuild.shared import safefiles

MANIFEST_VERSION = 1

# One entry: kind, mode, uid, gid, mtime_ns, size, extra (symlink target | sha256 | rdev | ""), dev, ino
Entry = tuple[str, int, int, int, int, int, str, int, int]


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISLNK(mode):
        return "symlink"
    return "other"


def _sha256(path: str) -> str:
    digest = hashlib.sha256()  # block by block: hashlib.file_digest is Python 3.11's
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _entry(path: str, info: os.stat_result, *, digest: bool) -> Entry:
    kind = _kind(info.st_mode)
    extra = ""
    if kind == "symlink":
        extra = os.readlink(path)
    elif kind == "file" and digest:
        extra = _sha256(path)
    elif kind == "other":
        extra = str(info.st_rdev)
    size = info.st_size if kind in ("file", "symlink") else 0
    return (kind, stat.S_IMODE(info.st_mode) | stat.S_IFMT(info.st_mode), info.st_uid, info.st_gid,
            info.st_mtime_ns, size, extra, info.st_dev, info.st_ino)


def walk(root: str) -> dict[str, os.stat_result]:
    """Every path under `root` ("/" for root itself, then "/a", "/a/b"), lstat'ed, without following links."""
    result = {"/": os.lstat(root)}
    stack = [("/", root)]
    while stack:
        rel, host = stack.pop()
        with os.scandir(host) as entries:
            for entry in entries:
                child = f"{rel.rstrip('/')}/{entry.name}"
                info = entry.stat(follow_symlinks=False)
                result[child] = info
                if stat.S_ISDIR(info.st_mode):
                    stack.append((child, entry.path))
    return result


def tree_manifest(root: str) -> dict[str, Entry]:
    """The manifest of `root`: files that are hard-linked outside it (into a store layer) are known by
    their inode; the others, including links within the tree (perl and perl5.36.0), also by their sha256."""
    tree = walk(root)
    inside: dict[tuple[int, int], int] = {}
    for info in tree.values():
        if stat.S_ISREG(info.st_mode):
            inside[info.st_dev, info.st_ino] = inside.get((info.st_dev, info.st_ino), 0) + 1
    entries = {}
    for rel, info in tree.items():
        host = os.path.join(root, rel.lstrip("/")) if rel != "/" else root
        shared = stat.S_ISREG(info.st_mode) and info.st_nlink > inside[info.st_dev, info.st_ino]
        entries[rel] = _entry(host, info, digest=stat.S_ISREG(info.st_mode) and not shared)
    return entries


def write_manifest(root: str, out: str, *, compression: str, all_root: bool) -> None:
    """Write the manifest of `root` to `out` (gzip JSON, sorted), through a temporary name."""
    document = {"version": MANIFEST_VERSION, "compression": compression, "all_root": all_root,
                "entries": tree_manifest(root)}
    data = json.dumps(document, sort_keys=True, separators=(",", ":")).encode()
    # In the store entry, which a group store's members may write: through safefiles, never a fixed partial name.
    safefiles.write_file(out, gzip.compress(data, compresslevel=1, mtime=0))


def read_manifest(path: str) -> dict[str, object] | None:
    """The manifest document, or None when it is missing, unreadable or of another version."""
    try:
        with gzip.open(path, "rb") as handle:
            document = json.loads(handle.read())
    except (OSError, ValueError, EOFError):
        return None
    if not isinstance(document, dict) or document.get("version") != MANIFEST_VERSION:
        return None
    return document


@dataclass(frozen=True)
class Delta:
    """What an upper layer must hold so that (parent tree + it) is the new tree."""

    paths: tuple[str, ...]  # new or changed, sorted; their parent directories are implied
    whiteouts: tuple[str, ...]  # removed, sorted
    bytes: int  # size of the regular files among `paths`
    tree_bytes: int  # size of every regular file in the new tree


def _same(view: TreeView, rel: str, info: os.stat_result, old: list[object]) -> bool:
    """Whether `rel` is as the manifest recorded; its host path is looked up only to read a link or hash a
    file (for each of 46,000 paths it was a third of the comparison's time)."""
    kind, mode, uid, gid, mtime_ns, size, extra, dev, ino = old
    new_kind = _kind(info.st_mode)
    if new_kind != kind or (stat.S_IMODE(info.st_mode) | stat.S_IFMT(info.st_mode)) != mode:
        return False
    if (info.st_uid, info.st_gid, info.st_mtime_ns) != (uid, gid, mtime_ns):
        return False
    if kind == "dir":
        return True
    if kind == "symlink":
        return os.readlink(view.host(rel)) == extra
    if kind == "other":
        return str(info.st_rdev) == extra
    if info.st_size != size:
        return False
    if (info.st_dev, info.st_ino) == (dev, ino):
        return True  # the very file the parent squashed (shared by hard links, guarded against writes)
    return bool(extra) and _sha256(view.host(rel)) == extra


class TreeView:
    """The tree a build squashes: a directory, or (with `upper`, envbuild.builder.plan.upperplan) a directory
    with another directory's files lying over it, as the runtime's overlay shows them to the tests.
    A directory in both keeps the lower one's attributes: the upper one was only made to hold files."""

    def __init__(self, root: str, upper: str | None = None) -> None:
        self.root, self.upper = root, upper
        self._from_upper: set[str] = set()
        self.paths = self._walk()

    def _walk(self) -> dict[str, os.stat_result]:
        tree = walk(self.root)
        if self.upper is None:
            return tree
        for rel, info in walk(self.upper).items():
            below = tree.get(rel)
            if below is not None and stat.S_ISDIR(below.st_mode):
                if stat.S_ISDIR(info.st_mode):
                    continue
                prefix = f"{rel}/"  # a file over a directory hides everything under it
                for hidden in [path for path in tree if path.startswith(prefix)]:
                    del tree[hidden]
            tree[rel] = info
            self._from_upper.add(rel)
        return tree

    def host(self, rel: str) -> str:
        """Where the file at `rel` is on the host."""
        root = self.upper if rel in self._from_upper and self.upper is not None else self.root
        return root if rel == "/" else os.path.join(root, rel.lstrip("/"))


def compute_delta(tree: TreeView | str, manifest: dict[str, list[object]]) -> Delta:
    """The difference between the tree (a TreeView, or a directory) and the tree the manifest describes."""
    view = tree if isinstance(tree, TreeView) else TreeView(tree)
    now = view.paths
    changed = []
    changed_bytes = tree_bytes = 0
    for rel in sorted(now):
        info = now[rel]
        if stat.S_ISREG(info.st_mode):
            tree_bytes += info.st_size
        old = manifest.get(rel)
        if old is None or not _same(view, rel, info, old):
            changed.append(rel)
            if stat.S_ISREG(info.st_mode):
                changed_bytes += info.st_size
    whiteouts = []
    for rel in manifest:
        if rel in now or rel == "/":
            continue
        parent = os.path.dirname(rel)
        parent_now, parent_old = now.get(parent), manifest.get(parent)
        # Only where the directory above survives as a directory: a removed or replaced parent
        # already hides everything under it.
        if parent_now is not None and stat.S_ISDIR(parent_now.st_mode) and parent_old and parent_old[0] == "dir":
            whiteouts.append(rel)
    return Delta(paths=tuple(changed), whiteouts=tuple(sorted(whiteouts)), bytes=changed_bytes, tree_bytes=tree_bytes)


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m envbuild.sif.manifest", description=__doc__.splitlines()[0])
    parser.add_argument("--compression", required=True)
    parser.add_argument("--all-root", action="store_true")
    parser.add_argument("root")
    parser.add_argument("out")
    args = parser.parse_args(argv)
    write_manifest(args.root, args.out, compression=args.compression, all_root=args.all_root)
    return 0


if __name__ == "__main__":
    sys.exit(main())
