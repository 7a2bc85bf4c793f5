"""Whether a store entry is still what it was made as: the content record an entry carries (size and
sha256 of each file a build copies out of it, the tree digest of a base's root file system; an env layer's
tree digest, in its `digest` file), who besides the user can write the entry, and the comparisons made on
reuse and by `envbuild cache verify`.

The record lives in the entry (`content.json`), so it only tells a change made without rewriting it: a
corrupted or truncated file, an image overwritten in place, an entry copied in from elsewhere. Whoever
can write the entry can rewrite the record too; that is the store's trust model (docs/concepts/trust.md):
write access to a store is the power to change what every user of it builds and runs.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from envbuild.shared.safefiles import atomic_write
from envbuild.store.layout import COMPLETE, CONTENT
from envbuild.store.places import is_private_group as is_private_group  # its home is store.places

RECORD_VERSION = 1
_CHUNK = 1 << 20


@dataclass(frozen=True)
class FileDigest:
    size: int
    sha256: str  # "sha256:<hex>", as envbuild.shared.treedigest writes digests


@dataclass(frozen=True)
class ContentRecord:
    """What an entry was made with: its files (name -> size and sha256) and trees (name -> tree digest)."""

    files: dict[str, FileDigest] = field(default_factory=dict)
    trees: dict[str, str] = field(default_factory=dict)


def digest_of_file(path: str | os.PathLike[str]) -> FileDigest:
    """Size and sha256 of the file at `path`, both of the one open file (a rename meanwhile cannot mix two)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return FileDigest(size, "sha256:" + digest.hexdigest())


def write_content_record(entry_dir: str | os.PathLike[str], *, files: tuple[str, ...] = (),
                         trees: dict[str, str] | None = None, known: dict[str, FileDigest] | None = None) -> ContentRecord:
    """Record the digests of `files` (names in the entry) and the given tree digests in `<entry>/content.json`.
    `known`: digests already computed (of an identical copy), so a file is not read twice."""
    entry = Path(entry_dir)
    digests = {name: (known or {}).get(name) or digest_of_file(entry / name) for name in files}
    record = ContentRecord(digests, dict(trees or {}))
    data = {"version": RECORD_VERSION,
            "files": {name: {"size": d.size, "sha256": d.sha256} for name, d in sorted(record.files.items())},
            "trees": dict(sorted(record.trees.items()))}
    atomic_write(entry / CONTENT, json.dumps(data, indent=2) + "\n", mode=0o644)
    return record


def read_content_record(entry_dir: str | os.PathLike[str]) -> ContentRecord | None:
    """The entry's record; None when it has none (made before envbuild recorded digests, or unfinished) or
    the record is not one envbuild writes: an entry without a valid record is never trusted as verified."""
    try:
        data = json.loads((Path(entry_dir) / CONTENT).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("version") != RECORD_VERSION:
        return None
    files, trees = data.get("files"), data.get("trees", {})
    if not isinstance(files, dict) or not isinstance(trees, dict):
        return None
    record = ContentRecord()
    for name, value in files.items():
        if not (isinstance(value, dict) and type(value.get("size")) is int and _is_digest(value.get("sha256"))):
            return None
        record.files[name] = FileDigest(value["size"], value["sha256"])
    for name, value in trees.items():
        if not _is_digest(value):
            return None
        record.trees[name] = value
    return record


def _is_digest(value: object) -> bool:
    return isinstance(value, str) and value.startswith("sha256:") and len(value) == 71


def others_can_write(store_root: str | os.PathLike[str], entry_dir: str | os.PathLike[str],
                     names: tuple[str, ...] = ()) -> str | None:
    """Why someone other than the user (or root) could have changed the entry, or None when nobody could:
    the store, its kind directory, the entry or one of its files `names` (and its record) is writable by
    group or others, belongs to another user, or is a symbolic link."""
    entry = Path(entry_dir)
    me = os.geteuid()
    for path in (Path(store_root), entry.parent, entry, *(entry / name for name in (*names, CONTENT))):
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            continue
        if stat.S_ISLNK(info.st_mode):
            return f"{path} is a symbolic link"
        if info.st_uid not in (me, 0):
            return f"{path} belongs to {_user_name(info.st_uid)}"
        if info.st_mode & stat.S_IWOTH:
            return f"{path} is writable by every user"
        if info.st_mode & stat.S_IWGRP and not is_private_group(info.st_gid):
            return f"{path} is writable by its group ({_group_name(info.st_gid)})"
    return None


def _user_name(uid: int) -> str:
    import pwd

    try:
        return f"user {pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def _group_name(gid: int) -> str:
    import grp

    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return f"gid {gid}"


def file_problem(name: str, path: str | os.PathLike[str], recorded: FileDigest | None, *, full: bool,
                 actual: FileDigest | None = None) -> str | None:
    """What is wrong with the entry's file `name`, found at `path` (the entry's file or a copy of it), against
    its record, or None. `full`: compare the sha256 (else only the size, which is free); `actual`: the
    digest of `path` when already computed."""
    if recorded is None:
        return f"no digest recorded for {name}"
    try:
        size = actual.size if actual else os.stat(path).st_size
    except OSError as exc:
        return f"{name}: {exc.strerror}"
    if size != recorded.size:
        return f"{name} is {size} bytes, its record says {recorded.size}"
    if full:
        found = actual or digest_of_file(path)
        if found.sha256 != recorded.sha256:
            return f"{name} has {found.sha256}, its record says {recorded.sha256}"
    return None


def recorded_env_digest(entry_dir: str | os.PathLike[str]) -> str | None:
    """The tree digest an env layer's env step recorded (`<entry>/digest`); None when there is none (an older
    envbuild made the layer) or the file holds anything but one digest."""
    try:
        with open(Path(entry_dir) / "digest", encoding="utf-8") as handle:
            text = handle.read(200).strip()
    except (OSError, ValueError):
        return None
    return text if _is_digest(text) and all(c in "0123456789abcdef" for c in text[7:]) else None


def env_layer_problem(entry_dir: str | os.PathLike[str]) -> tuple[str | None, str | None]:
    """(what is wrong with the env layer, its tree digest as found now): its root file system digested again
    and compared with the recorded digest; no record is a problem (nothing says what the tree should be)."""
    from envbuild.shared.treedigest import tree_digest

    entry = Path(entry_dir)
    recorded = recorded_env_digest(entry)
    if recorded is None:
        return "it has no recorded tree digest (made by an older envbuild), so it cannot be verified", None
    found = tree_digest(str(entry / "rootfs"))
    return tree_problem("rootfs", found, recorded), found


def tree_problem(name: str, found: str, recorded: str | None) -> str | None:
    if recorded is None:
        return f"no digest recorded for {name}"
    if found != recorded:
        return f"{name} has {found}, its record says {recorded}"
    return None


# --- envbuild cache verify ----------------------------------------------------------------------------

OK, MISMATCH, UNRECORDED, UNCHECKED, UNVERIFIABLE = "ok", "mismatch", "unrecorded", "unchecked", "unverifiable"
STATUSES = (OK, MISMATCH, UNRECORDED, UNVERIFIABLE, UNCHECKED)
# What `envbuild cache verify` fails on: a difference, or nothing to compare with where others could have changed it.
FAILURES = (MISMATCH, UNVERIFIABLE)


@dataclass(frozen=True)
class EntryCheck:
    """The outcome for one entry: ok, mismatch (a file or tree differs from its record), unrecorded (nothing
    to compare with: made by an older envbuild, in a store only the user can write), unverifiable (the same,
    where someone else could have written the entry: nothing says it is what was built) or unchecked (a base
    .sif's digest, the file not at hand)."""

    kind: str
    name: str
    path: str
    status: str
    details: tuple[str, ...] = ()

    @property
    def qualified_name(self) -> str:
        return f"{self.kind}/{self.name}"


# The files and trees of an entry that its record covers, by kind (what others_can_write is asked about).
_RECORDED_NAMES = {"image": ("image.sif",), "overlay": ("overlay.sqsh",), "base": ("rootfs", "digest"),
                   "env": ("rootfs", "digest")}


def verify_entries(root: str | os.PathLike[str]) -> Iterator[EntryCheck]:
    """Each complete entry of the store at `root`, checked in full (every recorded file hashed, every base
    tree digested again), as it is checked; unfinished entries are left out (`cache prune` removes them).
    An entry without a record that someone besides the user could have written is unverifiable, not
    unrecorded: a member of a group store could have put any image there."""
    from envbuild.store.entries import list_entries

    for entry in list_entries(Path(root), with_sizes=False):
        if entry.complete and entry.kind in ("base", "env", "image", "overlay"):
            check = verify_entry(entry.kind, entry.path)
            if check.status == UNRECORDED:
                shared = others_can_write(root, entry.path, _RECORDED_NAMES[entry.kind])
                if shared:
                    check = EntryCheck(check.kind, check.name, check.path, UNVERIFIABLE,
                                       (*check.details, f"{shared}: whoever can write there could have put anything "
                                                        "in its place, so it cannot be verified"))
            yield check


def verify_entry(kind: str, entry_dir: Path) -> EntryCheck:
    entry = Path(entry_dir)
    if kind == "env":
        return _verify_env(entry)
    if kind == "base":
        return _verify_base(entry)
    if kind == "overlay" and entry.name.startswith("base-"):
        return _verify_overlay_base(entry)
    name = "image.sif" if kind == "image" else "overlay.sqsh"
    try:
        is_link = stat.S_ISLNK(os.lstat(entry / name).st_mode)
    except OSError:
        is_link = False
    if is_link:  # envbuild writes a file there, never a link: whatever it names is not what was built
        return EntryCheck(kind, entry.name, str(entry), MISMATCH, (f"{name} is a symbolic link",))
    record = read_content_record(entry)
    if record is None:
        return EntryCheck(kind, entry.name, str(entry), UNRECORDED, (f"no content record for {name}",))
    problem = file_problem(name, entry / name, record.files.get(name), full=True)
    return EntryCheck(kind, entry.name, str(entry), MISMATCH if problem else OK, (problem or f"{name}: {record.files[name].sha256}",))


def _verify_base(entry: Path) -> EntryCheck:
    """The root file system against its recorded tree digest; a base whose digest is the tree's (every base
    but a local .sif) against its digest file as well, which is also the record of entries made before."""
    from envbuild.shared.treedigest import tree_digest

    record = read_content_record(entry)
    recorded_tree = record.trees.get("rootfs") if record else None
    digest_file = _read_text(entry / "digest")
    from_sif = _describes_sif(_read_text(entry / COMPLETE))
    if recorded_tree is None and (from_sif or not digest_file):
        return EntryCheck("base", entry.name, str(entry), UNRECORDED, ("no content record for rootfs",))
    found = tree_digest(str(entry / "rootfs"))
    problems = [p for p in (tree_problem("rootfs", found, recorded_tree) if recorded_tree else None,
                            None if from_sif or not digest_file else
                            _differs("the digest file", digest_file, found)) if p]
    return EntryCheck("base", entry.name, str(entry), MISMATCH if problems else OK, tuple(problems) or (f"rootfs: {found}",))


def _verify_env(entry: Path) -> EntryCheck:
    """The env layer's root file system against the tree digest its env step recorded."""
    if recorded_env_digest(entry) is None:
        return EntryCheck("env", entry.name, str(entry), UNRECORDED, ("no recorded tree digest for rootfs",))
    problem, found = env_layer_problem(entry)
    return EntryCheck("env", entry.name, str(entry), MISMATCH if problem else OK, (problem or f"rootfs: {found}",))


def _verify_overlay_base(entry: Path) -> EntryCheck:
    """overlays/base-*: the digest of a base .sif outside the store, when the file is still where it was."""
    from envbuild.shared.treedigest import file_digest

    recorded = _read_text(entry / "digest")
    described = _read_text(entry / COMPLETE)
    path = described.split(":", 1)[1] if described.startswith("localimage:") else ""
    if not recorded or not os.path.isabs(path) or not os.path.isfile(path):
        return EntryCheck("overlay", entry.name, str(entry), UNCHECKED,
                          (f"the digest of {path or 'a base .sif'}, which is not at hand to compare",))
    problem = _differs(f"the digest of {path}", recorded, file_digest(path))
    return EntryCheck("overlay", entry.name, str(entry), MISMATCH if problem else OK, (problem or f"{path}: {recorded}",))


def _differs(what: str, recorded: str, found: str) -> str | None:
    return None if recorded == found else f"{what} says {recorded}, the content has {found}"


def _describes_sif(described: str) -> bool:
    return described.startswith("localimage:") and described.rstrip().endswith((".sif", ".simg", ".img"))


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8").strip()
    except OSError:
        return ""
