"""`envbuild build --layered`: which stored image the new image's difference is layered over.

A full image qualifies when its tree manifest is in its store entry (envbuild.sif.manifest) and
it was made with the same compression and owner mode. Images on the nearest env layer come first:
the new build's own env layer (only the user layer changed), then the layer it installs the
difference on, then that one's parent, and so on, so the difference is the smallest one at hand.
Among images of one env layer, the most recently used, then the name, decide.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from envbuild.builder.plan.plandata import BuildRequest, Layers
from envbuild.sif.manifest import read_manifest
from envbuild.store.layout import EntryPaths, kind_dir

_MAX_ANCESTORS = 16


def _meta(entry: EntryPaths) -> dict[str, object] | None:
    try:
        meta = json.loads(Path(entry.meta).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return meta if isinstance(meta, dict) else None


def env_lineage(store_root: Path, env_entry: str, env_parent: str | None) -> list[str]:
    """The env layers the new tree descends from, nearest first (the new one itself, whether built yet or not)."""
    envs = kind_dir(store_root, "env")
    lineage = [env_entry]
    current: object = env_parent  # a parent named by the entries' records: text, checked below
    if current is None:
        meta = _meta(EntryPaths(str(envs / env_entry)))
        current = meta.get("parent") if meta else None
    while isinstance(current, str) and current not in lineage and len(lineage) < _MAX_ANCESTORS:
        entry = EntryPaths(str(envs / current))
        if not os.path.exists(entry.complete):
            break  # a base entry, or an env layer since removed
        lineage.append(current)
        meta = _meta(entry)
        current = meta.get("parent") if meta else None
    return lineage


def find_squash_parent(store_root: Path, *, env_entry: str, env_parent: str | None, image_entry: str,
                       compression: str, all_root: bool) -> str | None:
    """The image entry to layer the new image over, or None (then the whole tree is squashed)."""
    images = kind_dir(store_root, "image")
    if not images.is_dir():
        return None
    by_env: dict[str, list[tuple[float, str]]] = {}
    for entry_dir in images.iterdir():
        if entry_dir.name == image_entry:
            continue
        entry = EntryPaths(str(entry_dir))
        if not (os.path.exists(entry.complete) and os.path.isfile(entry.manifest) and os.path.isfile(entry.image)):
            continue
        meta = _meta(entry)
        if not meta or not isinstance(meta.get("parent"), str):
            continue
        used = os.stat(entry.last_used if os.path.exists(entry.last_used) else entry.complete).st_mtime
        by_env.setdefault(str(meta["parent"]), []).append((used, entry_dir.name))
    for env in env_lineage(store_root, env_entry, env_parent):
        for _used, name in sorted(by_env.get(env, ()), key=lambda item: (-item[0], item[1])):
            manifest = read_manifest(EntryPaths(str(images / name)).manifest)
            if manifest and manifest.get("compression") == compression and bool(manifest.get("all_root")) == all_root:
                return name
    return None


def with_squash_parent(request: BuildRequest, layers: Layers, *, use: Callable[[Path, str, str], None],
                       say: Callable[[str], None], asked: bool = True) -> BuildRequest:
    """The request with the image to layer over, held by a use lock for the build; said aloud. `asked`: --layered
    given (else the default, which squashes the whole tree without a note where no stored image fits)."""
    store_root = Path(request.facts.cache_dir)
    parent = find_squash_parent(store_root, env_entry=layers.env_entry, env_parent=request.env_parent,
                                image_entry=layers.image_entry, compression=request.options.compression,
                                all_root=not request.options.as_root)
    if parent is None:
        if asked:
            say("note: --layered: no stored image with a tree manifest to layer over; squashing the whole tree")
        return request
    use(store_root, "image", parent)
    if not os.path.exists(EntryPaths(str(kind_dir(store_root, "image") / parent)).complete):
        return request  # removed between choosing and locking it
    say(f"{'--layered' if asked else 'layered'}: writing only the difference, as a SIF overlay partition over image "
        f"{parent} (--full: squash the whole tree)")
    return replace(request, squash_parent=parent)
