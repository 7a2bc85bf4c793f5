"""What a build takes from the store is checked against the entry's content record first (envbuild.store.
integrity): a stored image or overlay before it is copied out, a base's digest before layer keys are made
from it, an env layer before its files are hard-linked into a build. A store only the user (or root) can
write is trusted, since only they could have changed it: its files' sizes are compared, which costs nothing,
and env layers are not hashed. A store others can write is checked in full: the copy made for the output is
hashed (so what is checked is what the user gets, whatever happens to the store file meanwhile), a base's
digest is recomputed from the base, not read from its file, and an env layer's tree is digested again."""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from envbuild.shared import safefiles
from envbuild.shared.errors import EnvbuildError
from envbuild.store.integrity import (
    digest_of_file,
    env_layer_problem,
    file_problem,
    others_can_write,
    read_content_record,
    tree_problem,
    write_content_record,
)
from envbuild.store.layout import COMPLETE
from envbuild.store.places import open_entry_path

if TYPE_CHECKING:
    from envbuild.builder.plan.plandata import BasePlan

TRUST_MODEL = "docs/concepts/trust.md"


def take_stored_file(store_root: Path, kind: str, entry_dir: str, name: str, partial: str | None, *,
                     say: Callable[[str], None], instead: str = "building it again") -> bool:
    """Whether the stored file `name` of the entry may be used. From a store others can write it is copied
    to `partial` (the output's copy) and the copy is hashed, or without `partial` hashed where it lies; from
    the user's own store only its size is compared. False, with a warning, when it does not match its record
    or, in a store others can write, has none: the entry is then not used (`instead` says what happens)."""
    entry = Path(entry_dir)
    stored = entry / name
    record = read_content_record(entry)
    shared = others_can_write(store_root, entry, (name,))
    if not shared:
        if record is None:
            _record_quietly(lambda: write_content_record(entry, files=(name,)))  # only the user could have changed it
            return True
        problem = file_problem(name, stored, record.files.get(name), full=False)
    elif record is None:
        problem = "it has no content record (made by an older envbuild), so it cannot be verified"
    elif os.path.islink(stored):
        problem = f"{name} is a symbolic link, not the file envbuild stored"  # never read through it
    elif partial is None:
        problem = file_problem(name, stored, record.files.get(name), full=True)
    else:
        try:
            # Into the output's directory (a group project others may write) as safefiles writes: an
            # unpredictable name, renamed to `partial` within the directory's descriptor, never through a link.
            safefiles.copy_file(stored, partial, mode=0o666 & ~safefiles.current_umask())
            problem = file_problem(name, partial, record.files.get(name), full=True, actual=digest_of_file(partial))
        except OSError as exc:
            _remove(partial)
            if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            from envbuild.builder.execute.diskspace import disk_full_error

            raise disk_full_error("output", partial, os.path.getsize(stored), f"the stored {kind}") from None
        except BaseException:
            _remove(partial)
            raise
        if problem:
            _remove(partial)
    if problem:
        _say_not_used(say, store_root, kind, entry, problem, instead, shared)
        return False
    return True


def take_env_layer(store_root: Path, entry_dir: str, *, say: Callable[[str], None], instead: str,
                   checked: tuple[str | None] | None = None) -> bool:
    """Whether the complete env layer may be used: hard-linked into a sandbox, a user layer's lower tree, or a
    new env layer that installs on it. From the user's own store, yes, unhashed (write access is trust, and
    a digest of the reference's 1.2 GB layer costs seconds). From a store others can write, its root file
    system is digested again and compared with the digest its env step recorded (`digest`, written before
    `complete`); a mismatch or no record: False, with a warning naming the entry and the store. `checked`:
    what that comparison found, made ahead by this build (envbuild.builder.sessions.prefetch)."""
    entry = Path(entry_dir)
    shared = others_can_write(store_root, entry, ("rootfs", "digest"))
    if not shared:
        return True
    problem = checked[0] if checked is not None else env_layer_problem(entry)[0]
    if problem:
        _say_not_used(say, store_root, "env", entry, problem, instead, shared)
        return False
    return True


def _say_not_used(say: Callable[[str], None], store_root: Path, kind: str, entry: Path, problem: str, instead: str,
                  shared: str | None) -> None:
    say(f"warning: {kind} entry {entry.name} in the store {store_root} does not match its content record: "
        f"{problem}; not used, {instead}"
        + (f" ({shared}: anyone who can write there can change it, see {TRUST_MODEL};"
           f" `envbuild cache verify --cache-dir {store_root}` checks the whole store)" if shared else ""))


def withdraw_entry(store_root: Path, kind: str, entry_dir: str) -> None:
    """Take back the complete marker of an entry that did not match its record (under the entry's lock),
    so the build makes it again instead of skipping a step whose result is "there"."""
    entry = Path(entry_dir)
    try:
        # By the entry's descriptor, opened the store's way: a kind directory a member swapped for a link
        # is refused, never used to unlink a `complete` elsewhere.
        entry_fd = open_entry_path(entry)
        if entry_fd is not None:
            try:
                safefiles.unlink_at(entry_fd, COMPLETE)
            finally:
                os.close(entry_fd)
    except OSError as exc:
        raise EnvbuildError(
            f"the {kind} entry {entry.name} in the store {store_root} does not match its record and cannot be made "
            f"again here: {exc.strerror}",
            f"remove it (`envbuild cache rm --cache-dir {store_root} {kind}/{entry.name}`, or ask its owner to) "
            "and build again") from None


def record_stored_file(entry_dir: str, name: str) -> None:
    """Record the digest of the file a build just wrote into the entry (under the entry's lock)."""
    write_content_record(entry_dir, files=(name,))


def trusted_base_digest(store_root: Path, entry_dir: str, rootfs: str, digest_source: str, recorded: str, *,
                        made_now: bool) -> str:
    """The base's content digest for the layer keys. From the user's own store, or for a base this build just
    made, the recorded one (the rootfs's tree digest is recorded beside it once). From a store others can
    write it is recomputed from the base (its root file system, or the local .sif it was unpacked from) and
    the root file system is compared with its record: a base that does not match is refused."""
    from envbuild.shared.treedigest import file_digest, tree_digest

    entry = Path(entry_dir)
    record = read_content_record(entry)
    from_tree = digest_source == rootfs
    shared = None if made_now else others_can_write(store_root, entry, ("digest", "rootfs"))
    if not shared:
        if recorded and (record is None or "rootfs" not in record.trees):
            _record_quietly(lambda: write_content_record(entry, trees={"rootfs": recorded if from_tree else tree_digest(rootfs)}))
        return recorded
    found = tree_digest(rootfs)
    # Entries made before content records: a tree digest file is the rootfs's record; a .sif's is not.
    expected = (record.trees.get("rootfs") if record else None) or (recorded if from_tree and recorded else None)
    problem = tree_problem("rootfs", found, expected)
    digest = found if from_tree else file_digest(digest_source)
    if problem is None and digest != recorded:
        problem = f"its digest file says {recorded or 'nothing'}, the base has {digest}"
    if problem:
        raise EnvbuildError(
            f"the base entry {entry.name} in the store {store_root} does not match its record: {problem}; "
            f"not used ({shared}: anyone who can write there can change it, see {TRUST_MODEL})",
            f"remove it (`envbuild cache rm --cache-dir {store_root} base/{entry.name}`, or ask its owner to) and "
            f"build again; `envbuild cache verify --cache-dir {store_root}` checks the whole store")
    return digest


def trusted_file_digest(store_root: Path, entry_dir: str, path: str, recorded: str) -> str:
    """The digest of a file outside the store (an overlay's base .sif) that the store keeps: recomputed when
    others can write the store, a mismatch refused."""
    from envbuild.shared.treedigest import file_digest

    entry = Path(entry_dir)
    shared = others_can_write(store_root, entry, ("digest",))
    if not shared:
        return recorded
    digest = file_digest(path)
    if recorded and digest != recorded:
        raise EnvbuildError(
            f"the store entry {entry.name} in {store_root} records {recorded} for {path}, which has {digest}; "
            f"not used ({shared}: anyone who can write there can change it, see {TRUST_MODEL})",
            f"remove it (`envbuild cache rm --cache-dir {store_root} overlay/{entry.name}`, or ask its owner to) "
            "and build again")
    return digest


def _record_quietly(write: Callable[[], object]) -> None:
    # A store the user may only read (a root-owned site store) keeps its entries unrecorded; that is no error.
    with contextlib.suppress(OSError):
        write()


def _remove(path: str) -> None:
    safefiles.remove_file(path)  # the name itself, a link included, never what a link names


def base_digest_source(base: BasePlan) -> str:
    """What the base's digest is computed from (its root file system, or the local .sif it was unpacked from),
    as the base plan's own digest step says."""
    from envbuild.builder.plan.actions import RecordDigest

    for step in base.steps:
        for action in step.actions:
            if isinstance(action, RecordDigest):
                return action.path
    return base.rootfs
