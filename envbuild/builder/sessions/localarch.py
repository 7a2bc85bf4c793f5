"""The architecture checks a session makes with what only it can read (the spec's local base, the lock file):
the rules themselves are envbuild.builder.plan.archcheck's (pure)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from envbuild.shared.errors import EnvbuildError

if TYPE_CHECKING:
    from pathlib import Path

    from envbuild.envspec.loadspec import LoadedSpec
    from envbuild.lock.lockmodel import Lock


def check_lock_arch(loaded: LoadedSpec, lock: Lock, path: Path) -> None:
    """A lock holds the wheels of one architecture: one for another than the system's cannot be installed."""
    from envbuild.host.arch import host_arch, system_arch
    from envbuild.recipes.loadrecipe import load_recipe

    recipe = load_recipe(loaded.recipe_ref)
    wanted = system_arch(recipe, host_arch())
    if lock.target.arch != wanted:
        raise EnvbuildError(
            f"--locked: {path} was resolved for {lock.target.arch} ({lock.target.platform}), but system "
            f"{recipe.name} runs {wanted} ({recipe.cite('architecture')}): its wheels cannot be installed there",
            f"run `envbuild lock {loaded.path}` again (it resolves for {wanted}), and commit the new lock")


def check_spec_architecture(loaded: LoadedSpec) -> None:
    """The architecture check of make_request, before a build does anything else (resolving a lock included)."""
    from envbuild.builder.plan.archcheck import spec_architecture_problem
    from envbuild.host.arch import host_arch
    from envbuild.recipes.loadrecipe import load_recipe

    spec = loaded.spec
    base = str(loaded.resolve_host_path(spec.base.ref)) if spec.base.kind == "localimage" else None
    problem = spec_architecture_problem(spec, load_recipe(loaded.recipe_ref), host=host_arch(), base_arch=base_arch(base))
    if problem is not None:
        raise EnvbuildError(f"{loaded.path}: {problem[0]}", problem[1])


def base_arch(path: str | None) -> str:
    """A local base's architecture, read without running it: a SIF's header, a sandbox's programs ("" unknown)."""
    from envbuild.host.arch import normalise_arch, rootfs_arch
    from envbuild.sif.format import read_sif_arch

    if not path:
        return ""
    if os.path.isdir(path):
        return rootfs_arch(path)
    return normalise_arch(read_sif_arch(path) or "")
