"""How envbuild and envrun start a Python of their own on the host: never with the working
directory on sys.path.

`python -m MODULE` and `python -c CODE` put the working directory first on sys.path, so a `json.py` or an
`envbuild/` package in a job's or a project's directory (which other members of a group may write) would
be imported, and run as the user, by envbuild's own helpers. They start instead as `python -I` (isolated: no
working directory, no $PYTHON* variables, no user site) with the directory that holds this envbuild put on
sys.path explicitly; bin/envrun and bin/envbuild do the same in bash. Stdlib only: envrun's launch path
(the report sampler's start) imports it.
"""

from __future__ import annotations

import os
import sys

# Run as `python -I -c MODULE_BOOT ROOT MODULE ARGS...`: ROOT first on sys.path, then MODULE as __main__
# with sys.argv[1:] = ARGS, as `-m` would (runpy is what -m uses).
MODULE_BOOT = ("import sys; sys.path.insert(0, sys.argv[1]); del sys.argv[:2]; import runpy; "
               'runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)')


def package_root() -> str:
    """The directory that holds the envbuild package running now (a checkout, or site-packages)."""
    import envbuild

    return os.path.dirname(os.path.dirname(os.path.abspath(envbuild.__file__)))


def isolated_module(module: str, *args: str, python: str | None = None, root: str | None = None) -> tuple[str, ...]:
    """The words that run `python -m module args...` of envbuild on the host, isolated from the working
    directory: `python` (default: this interpreter) with -I, and `root` (default: this envbuild's) on sys.path."""
    return (python or sys.executable, "-I", "-c", MODULE_BOOT, root or package_root(), module, *args)


def isolation_flags() -> tuple[str, ...]:
    """The flag that keeps this interpreter's working directory off sys.path for a module that is not
    envbuild's own (cotainr): -P where Python has it (3.11: $PYTHONPATH and the user site stay, as the
    module may be installed there), else -I."""
    return ("-P",) if sys.version_info >= (3, 11) else ("-I",)
