"""Which Python a build installs into (the spec's python.target), as the commands that reach it.

envbuild-venv and venv-over-base install into the venv at VENV_PREFIX (the second made with
--system-site-packages from the base's Python); base installs with the base's own Python, the one the base puts
first on its PATH. That one is found inside the base when the command runs (`command -v`, in the base's own
environment as the runtime sets it up), so the plans stay pure and show exactly what runs.
"""

from __future__ import annotations

import shlex

from envbuild.envspec.specmodel import VENV_PREFIX, PythonEnv

# The variable the located interpreter is kept in by locate_base_python's shell text.
BASE_PYTHON_VAR = "py"


def installs_into_base(python: PythonEnv) -> bool:
    """True when no venv is made: the base's own Python gets the packages."""
    return python.target == "base"


def locate_base_python(python: PythonEnv) -> str:
    """Shell text that sets $py to the base's Python (python.interpreter, default python3 else python, on the
    base's PATH), or stops saying what is missing and how to go on."""
    names = ("python3", "python") if python.interpreter == "python3" else (python.interpreter,)
    lookup = " || ".join(f"command -v {shlex.quote(name)}" for name in names)
    shown = " or ".join(names)
    message = (f"envbuild: python.target: {python.target} needs a Python in the base, but the base has no {shown} "
               f"on its PATH ($PATH)")
    fix = ("fix: write python.target: envbuild-venv (envbuild makes a venv from a Python it installs), set "
           "python.interpreter to a path inside the base, or choose a base with Python")
    return (f"{BASE_PYTHON_VAR}=$({lookup}) || {{ echo \"{message}\" >&2; echo {shlex.quote(fix)} >&2; exit 3; }}")


def with_target_python(python: PythonEnv, argv: list[str] | tuple[str, ...]) -> list[str]:
    """`argv`, whose first word is the Python to install into or list, run with the spec's target Python:
    the venv's as written, or the base's located first (the rest of `argv` passed on unchanged)."""
    if not installs_into_base(python):
        return [f"{VENV_PREFIX}/bin/python", *argv[1:]]
    return ["/bin/sh", "-ec", f'{locate_base_python(python)}\nexec "${BASE_PYTHON_VAR}" "$@"', "envbuild-python", *argv[1:]]


def target_python_words(python: PythonEnv) -> str:
    """The target Python as a shell word, in shell text that ran locate_base_python first for a base target."""
    return f'"${BASE_PYTHON_VAR}"' if installs_into_base(python) else VENV_PREFIX + "/bin/python"
