"""Which complete env layer in the store a new env layer installs its difference on (the choice itself is
pure: envbuild.build.layers.choose_env_parent); this module only reads the store's entries."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from envbuild.build.request import BuildRequest, Layers


def find_env_parent(store_root: Path, layers: Layers, request: BuildRequest) -> str | None:
    """A complete env layer to install the difference on top of: same base, installer and sources,
    and every package it has is wanted by the new build (so nothing needs removing)."""
    from envbuild.build.layers import choose_env_parent
    from envbuild.store.layout import EntryPaths, kind_dir

    candidates = []
    envs = kind_dir(store_root, "env")
    if not envs.is_dir():
        return None
    for entry_dir in envs.iterdir():
        entry = EntryPaths(str(entry_dir))
        try:
            if not os.path.exists(entry.complete):
                continue
            meta = json.loads(Path(entry.meta).read_text(encoding="utf-8"))
            freeze = Path(entry.freeze).read_text(encoding="utf-8").split()
            used = os.stat(entry.last_used if os.path.exists(entry.last_used) else entry.complete).st_mtime
        except (OSError, ValueError):
            continue
        candidates.append((entry_dir.name, meta, freeze, used))
    return choose_env_parent(candidates, compat=layers.env_compat, requirements=request.spec.python.requirements(),
                             locked=request.lock.requirements)
