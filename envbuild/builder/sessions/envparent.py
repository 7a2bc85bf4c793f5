"""Which complete env layer in the store a new env layer installs its difference on (the choice itself is
pure: envbuild.builder.plan.layers.choose_env_parent); this module only reads the store's entries.

An entry's meta.json and freeze.txt only steer the choice; they are read as plain data of the shape the env
step writes them in (a JSON object with string fields, `name==version` lines, bounded in size), whoever's
store it is: anything else, garbage or a list where a string belongs, leaves the layer out as a candidate
rather than stopping the build. The layer chosen is checked against its record before its files are used
(envbuild.builder.sessions.storetrust.take_env_layer, in a store others can write)."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Collection
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from envbuild.builder.plan.plandata import BuildRequest, Layers

# More than any real venv's list (the reference's: 60 lines, 1.3 KB), far less than a read worth avoiding.
_MAX_READ = 1 << 20
_PIN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*==[^\s=]+")


def find_env_parent(store_root: Path, layers: Layers, request: BuildRequest, *,
                    passed_over: Collection[str] = ()) -> str | None:
    """A complete env layer to install the difference on top of: same base, installer and sources,
    and every package it has is wanted by the new build (so nothing needs removing). `passed_over`: layers
    not to choose (found not to match their record)."""
    from envbuild.builder.plan.layers import choose_env_parent
    from envbuild.store.layout import EntryPaths, kind_dir

    candidates = []
    envs = kind_dir(store_root, "env")
    if not envs.is_dir():
        return None
    for entry_dir in envs.iterdir():
        if entry_dir.name in passed_over:
            continue
        entry = EntryPaths(str(entry_dir))
        try:
            if not os.path.exists(entry.complete):
                continue
            meta, freeze = read_meta(entry.meta), read_freeze(entry.freeze)
            used = os.stat(entry.last_used if os.path.exists(entry.last_used) else entry.complete).st_mtime
        except (OSError, ValueError):
            continue
        if meta is None or freeze is None:
            continue
        candidates.append((entry_dir.name, meta, freeze, used))
    return choose_env_parent(candidates, compat=layers.env_compat, requirements=request.spec.python.requirements(),
                             locked=request.lock.requirements)


def read_meta(path: str) -> dict[str, Any] | None:
    """An env layer's meta.json when it is what the env step writes (the fields a parent is chosen by: kind,
    compat, requirements, parent); None otherwise."""
    meta = json.loads(_read_bounded(path))
    if not isinstance(meta, dict):
        return None
    strings = ("kind", "compat")
    if not all(isinstance(meta.get(name), str) for name in strings):
        return None
    if not (meta.get("parent") is None or isinstance(meta["parent"], str)):
        return None
    requirements = meta.get("requirements", [])
    if not (isinstance(requirements, list) and all(isinstance(r, str) for r in requirements)):
        return None
    return meta


def read_freeze(path: str) -> list[str] | None:
    """An env layer's package list, one `name==version` a line as the env step writes it; None otherwise."""
    lines = _read_bounded(path).splitlines()
    return lines if all(_PIN.fullmatch(line) for line in lines) else None


def _read_bounded(path: str) -> str:
    with open(path, encoding="utf-8") as handle:
        text = handle.read(_MAX_READ + 1)
    if len(text) > _MAX_READ:
        raise ValueError(f"{path}: over {_MAX_READ} characters")
    return text
