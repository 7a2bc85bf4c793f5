"""The build's request: what the pure planners get from the spec, its lock, this machine and the files the
spec names (digests), with the options of the command. Shared by `envbuild build`, `lock` and the copy
made while a stale lock is resolved again (envbuild.builder.sessions.prefetch), so none of those imports another."""

from __future__ import annotations

import os
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

# The lock a request takes is read and decided once, by envbuild.builder.sessions.lockdecision; these two of its names
# are where a build's callers have found them.
from envbuild.builder.sessions.lockdecision import load_fresh_lock as load_fresh_lock
from envbuild.builder.sessions.lockdecision import torch_index_for as torch_index_for
from envbuild.sif.compression import DEFAULT_COMPRESSION

if TYPE_CHECKING:
    from envbuild.builder.plan.plandata import BasePlan, BuildRequest
    from envbuild.envspec.loadspec import LoadedSpec
    from envbuild.host.buildhost import HostFacts
    from envbuild.lock.lockmodel import LoadedLock
    from envbuild.lock.policy import LockFlags


@dataclass(frozen=True)
class BuildOptions:
    output: Path
    keep_work: bool = False
    verbose: bool = False
    locked: bool = False
    frozen: bool = False  # install SPEC.lock as it is, unchecked (uv sync --frozen)
    upgrade: bool = False  # resolve every package anew and rewrite SPEC.lock
    quiet: bool = False  # errors and the result only
    heartbeat_s: float | None = None  # off a terminal: a `still running:` line this often (None: the default)
    compression: str = DEFAULT_COMPRESSION
    cache_dir: Path | None = None
    log_path: Path | None = None
    source_date_epoch: int | None = None
    # The difference as a SIF overlay partition over a stored image (envbuild.builder.sessions.squashparent). True:
    # --layered; False: --full; None (envbuild build's default): layered where a stored image fits, except with
    # SOURCE_DATE_EPOCH, whose builds promise bytes that do not depend on what the store held.
    layered: bool | None = False

    @property
    def layered_form(self) -> bool:
        """Whether the image may be written as a layer over a stored one (its key says so)."""
        return self.layered if self.layered is not None else self.source_date_epoch is None

    @property
    def lock_flags(self) -> LockFlags:
        """--locked, --frozen, --upgrade, as envbuild.lock.policy takes them."""
        from envbuild.lock.policy import LockFlags

        return LockFlags(locked=self.locked, frozen=self.frozen, upgrade=self.upgrade)


def _base_identity(loaded: LoadedSpec) -> tuple[str | None, str]:
    """localimage: the host path and a fingerprint that changes when the base does."""
    spec = loaded.spec
    if spec.base.kind != "localimage":
        return None, ""
    base = loaded.resolve_host_path(spec.base.ref)
    if base.is_dir():
        from envbuild.shared.treedigest import tree_digest

        return str(base), tree_digest(str(base))
    stat = base.stat()
    return str(base), f"{stat.st_size}-{stat.st_mtime_ns}"


def _file_digests(loaded: LoadedSpec) -> tuple[tuple[str, str], ...]:
    from envbuild.shared.treedigest import file_digest, tree_digest

    digests = []
    for item in loaded.spec.files:
        path = str(loaded.resolve_host_path(item.src))
        digests.append((item.src, tree_digest(path) if os.path.isdir(path) else file_digest(path)))
    return tuple(digests)


def _recipe_digest(recipe_ref: str) -> str:
    """The content digest of the recipe file the build reads (recipes/<name>.yaml, or the spec's recipe file by its
    path): it enters the image's key and record, so that editing the file builds anew."""
    from envbuild.recipes.loadrecipe import is_recipe_path, recipes_dir
    from envbuild.shared.treedigest import file_digest

    path = Path(recipe_ref) if is_recipe_path(recipe_ref) else recipes_dir() / f"{recipe_ref}.yaml"
    return file_digest(str(path)) if path.is_file() else ""


def make_request(loaded: LoadedSpec, options: BuildOptions, facts: HostFacts, *, lock: LoadedLock | None,
                 other_arch_ok: bool = False) -> BuildRequest:
    """The build's request; refused here, before any download, when the system's architecture is not this
    machine's or the local base's (envbuild.builder.plan.archcheck). other_arch_ok: a lock resolved for another
    architecture, which builds nothing."""
    from envbuild.builder.plan.archcheck import check_architecture
    from envbuild.builder.plan.plandata import BaseSource, BuildRequest, ImageOptions, LockSource, SpecSource
    from envbuild.builder.sessions.localarch import base_arch
    from envbuild.lock.lockmodel import lock_sha256, requirements_with_hashes
    from envbuild.recipes.loadrecipe import load_recipe

    spec = loaded.spec
    base_path, fingerprint = _base_identity(loaded)
    epoch = options.source_date_epoch
    built_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch if epoch is not None else time.time()))
    locked = LockSource()
    if lock is not None:
        locked = LockSource(requirements=requirements_with_hashes(lock.lock), text=lock.text, sha256=lock_sha256(lock.text),
                            python=".".join(lock.lock.target.python.split(".")[:2]))
    request = BuildRequest(
        source=SpecSource(spec=spec, text=loaded.text, sha256=loaded.sha256, directory=str(loaded.directory.absolute()),
                          file_digests=_file_digests(loaded)),
        recipe=load_recipe(loaded.recipe_ref), facts=facts, recipe_digest=_recipe_digest(loaded.recipe_ref),
        options=ImageOptions(output=str(options.output), build_id=f"{os.getpid()}-{uuid.uuid4().hex[:6]}",
                             as_root=facts.as_root, keep_work=options.keep_work, compression=options.compression,
                             source_date_epoch=epoch, layered=options.layered_form, built_at=built_at),
        base=BaseSource(path=base_path, fingerprint=fingerprint, arch=base_arch(base_path)), lock=locked,
    )
    if not other_arch_ok:
        check_architecture(request, str(loaded.path))
    return request


def read_digest(base_plan: BasePlan) -> str:
    return read_digest_file(base_plan.digest_file)


def read_digest_file(path: str) -> str:
    """The base's content digest recorded at `path`; "" when none is recorded (yet)."""
    try:
        return Path(path).read_text(encoding="utf-8").strip()
    except OSError:
        return ""
