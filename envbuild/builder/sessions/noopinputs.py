"""What an image build's up-to-date verdict was made from, as (kind, path) pairs for the light check's record
(envbuild.commands.uptodate digests each): for a command whose arguments, working directory, environment and
envbuild code are the same, these are every file the verdict read, so the same digests mean the same verdict.

Kinds: "content" (a file's bytes; an absent file counts as such), "tree" (a directory's or file's content),
"listing" (a directory's names), "status" (a file's identity and times: the output image, programs), "access"
(whether a directory may be written, its mode and owner)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterator

    from envbuild.builder.plan.plandata import BuildRequest
    from envbuild.envspec.loadspec import LoadedSpec
    from envbuild.store.layout import EntryPaths


def noop_inputs(loaded: LoadedSpec, request: BuildRequest, base_entry: EntryPaths) -> list[tuple[str, str]]:
    """Every file the up-to-date verdict read. A new input of the layer keys (envbuild.builder.plan.layers) or of
    the host facts they take is named here too, or the light check would answer past a change of it."""
    output = str(request.options.output)
    return [
        ("content", str(loaded.path.absolute())),
        *_lock_inputs(loaded),
        *_recipe_inputs(loaded),
        *(("tree", _as_written(loaded, item.src)) for item in loaded.spec.files),
        *_base_inputs(loaded),
        *_host_inputs(),
        # The store's base: its digest decides the keys; an entry without its marker is built again.
        ("content", base_entry.digest), ("content", base_entry.complete),
        ("status", output),  # the image key inside it: any rewrite changes its inode or times
        ("access", str(Path(output).parent)),  # a directory the full path cannot write is an error there
        *_project_file_inputs(output),
    ]


def _as_written(loaded: LoadedSpec, relative: str) -> str:
    """A path of the spec as written, beside the spec, its links not resolved: a link pointed elsewhere is
    followed again by the light check, as the full path would."""
    candidate = Path(relative).expanduser()
    return str(candidate if candidate.is_absolute() else loaded.directory.absolute() / candidate)


def _lock_inputs(loaded: LoadedSpec) -> Iterator[tuple[str, str]]:
    from envbuild.lock.lockmodel import lock_path_for

    yield "content", str(lock_path_for(loaded.path).absolute())


def _recipe_inputs(loaded: LoadedSpec) -> Iterator[tuple[str, str]]:
    """Every recipe (one may name another) and the directory's names; a recipe file by path as the build reads
    it, from the spec file's directory (LoadedSpec.recipe_ref)."""
    from envbuild.recipes.loadrecipe import is_recipe_path, recipes_dir

    directory = recipes_dir()
    yield "listing", str(directory)
    for name in sorted(os.listdir(directory)) if directory.is_dir() else ():
        yield "content", str(directory / name)
    if is_recipe_path(loaded.spec.system):
        yield "content", loaded.recipe_ref


def _base_inputs(loaded: LoadedSpec) -> Iterator[tuple[str, str]]:
    if loaded.spec.base.kind == "localimage":  # its fingerprint: a tree's digest, or an image's size and time
        base = _as_written(loaded, loaded.spec.base.ref)
        yield ("tree" if os.path.isdir(base) else "status"), base


def _host_inputs() -> Iterator[tuple[str, str]]:
    """The host facts that enter the keys: pip's configuration files, the apt sources (the Debian mirror), the
    programs found on PATH (uv and its version, the runtime)."""
    from envbuild.host.pip import pip_config_files

    for path in pip_config_files(os.environ, Path(os.environ.get("HOME", str(Path.home()))), Path(sys.prefix)):
        yield "content", str(path.absolute())
    yield "content", "/etc/apt/sources.list"
    yield "listing", "/etc/apt/sources.list.d"
    if os.path.isdir("/etc/apt/sources.list.d"):
        for name in sorted(os.listdir("/etc/apt/sources.list.d")):
            yield "content", f"/etc/apt/sources.list.d/{name}"
    yield "status", str(Path(sys.executable).with_name("uv"))
    for directory in dict.fromkeys(os.environ.get("PATH", "").split(os.pathsep)):
        if directory:
            yield "status", os.path.abspath(directory)  # a program added or removed changes the directory
            for program in ("uv", "apptainer", "singularity"):
                yield "status", os.path.join(os.path.abspath(directory), program)


def _project_file_inputs(output: str) -> Iterator[tuple[str, str]]:
    """An output in the working directory updates ./envrun.yaml (envbuild.launch.projectfile): the same file,
    owner and mode give the same (no) update."""
    here = Path.cwd()
    if Path(output).parent.resolve() == here.resolve():
        yield "content", str(here / "envrun.yaml")
        yield "status", str(here / "envrun.yaml")
        yield "status", str(here)
