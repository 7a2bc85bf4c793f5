"""Writing a file so that a reader sees either the old content or the new, never half of it.

A shared leaf that imports only `os`: envrun's start-up path (recipes/load.py writes its cache) uses it.
"""

from __future__ import annotations

import os


def atomic_write(path: str | os.PathLike[str], data: bytes | str, *, mode: int | None = None) -> None:
    """Write `data` (text as UTF-8) to `.<name>.partial-<pid>` beside `path`, then rename it over `path`.

    The rename also means a file that is a hard link into a store layer is replaced, never written
    through. `mode`: the new file's permission bits (default: the umask's)."""
    path = os.fspath(path)
    directory, name = os.path.split(path)
    partial = os.path.join(directory, f".{name}.partial-{os.getpid()}")
    try:
        with open(partial, "wb") as handle:
            handle.write(data.encode("utf-8") if isinstance(data, str) else data)
        if mode is not None:
            os.chmod(partial, mode)
        os.replace(partial, path)
    except BaseException:
        # A failed write leaves nothing behind; the old file, if any, is untouched.
        try:
            os.unlink(partial)
        except OSError:
            pass
        raise
