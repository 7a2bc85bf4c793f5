"""The output path given with -o: checked before anything slow runs (resolving a lock, building)."""

from __future__ import annotations

import os
from pathlib import Path

from envbuild.shared.errors import EnvbuildError


def ensure_can_write(path: Path) -> None:
    """Make the output's directory and check that it is writable; a clear error otherwise. The directories are
    made without following a link another member planted on the way in a group project (a plain mkdir -p made
    them in the link's target): such a link is refused (safefiles.UnsafePlaceError, with its fix)."""
    from envbuild.shared.safefiles import make_dirs

    directory = path.parent
    try:
        make_dirs(directory)
    except OSError as exc:
        raise EnvbuildError(f"cannot create output directory {directory}: {exc.strerror}", "choose another -o path") from None
    if not os.access(directory, os.W_OK):
        raise EnvbuildError(f"cannot write to {directory}", "choose an output path you can write (-o)")
