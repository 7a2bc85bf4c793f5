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


# Run as `bash -c WITH_CONDA_LOOKUP NAME0 NAME...` where the base sets $WITH_CONDA (LUMI's PyTorch images:
# `source /opt/miniconda3/bin/activate pytorch`): the Python a user of the image gets, who runs $WITH_CONDA
# first (envrun does, envbuild.launch.shims), found after it; bash, since /bin/sh may be dash, which has no
# `source`. Exits 4 where $WITH_CONDA fails, 5 where none of the names is found after it.
WITH_CONDA_LOOKUP = ('eval "$WITH_CONDA" >/dev/null 2>&1 || exit 4; '
                     'for name in "$0" "$@"; do command -v "$name" && exit 0; done; exit 5')


def locate_base_python(python: PythonEnv) -> str:
    """Shell text that sets $py to the base's Python as its users get it (python.interpreter, default python3
    else python): on the base's PATH after $WITH_CONDA where the base sets it, else on its PATH; or stops saying
    what is missing and how to go on."""
    names = ("python3", "python") if python.interpreter == "python3" else (python.interpreter,)
    lookup = " || ".join(f"command -v {shlex.quote(name)}" for name in names)
    shown = " or ".join(names)
    message = (f"envbuild: python.target: {python.target} needs a Python in the base, but the base has no {shown} "
               f"on its PATH ($PATH)")
    fix = ("fix: write python.target: envbuild-venv (envbuild makes a venv from a Python it installs), set "
           "python.interpreter to a path inside the base, or choose a base with Python")
    conda = (f"envbuild: python.target: {python.target}: the base sets WITH_CONDA ($WITH_CONDA), which its users "
             f"run first, but")
    conda_fix = ("fix: check the base's $WITH_CONDA (envrun IMAGE bash -c \"$WITH_CONDA && command -v python\"), or "
                 "set python.interpreter to a path inside the base")
    with_conda = (f'bash -c {shlex.quote(WITH_CONDA_LOOKUP)} {" ".join(map(shlex.quote, names))} || {{ status=$?; '
                  f'case $status in 4) echo "{conda} it fails" >&2 ;; 5) echo "{conda} no {shown} is on the PATH it '
                  f'gives" >&2 ;; *) echo "{conda} the base has no bash to run it" >&2 ;; esac; '
                  f"echo {shlex.quote(conda_fix)} >&2; exit 3; }}")
    return (f'if [ -n "${{WITH_CONDA:-}}" ]; then {BASE_PYTHON_VAR}=$({with_conda}); '
            f"else {BASE_PYTHON_VAR}=$({lookup}) || {{ echo \"{message}\" >&2; echo {shlex.quote(fix)} >&2; exit 3; }}; fi")


def with_target_python(python: PythonEnv, argv: list[str] | tuple[str, ...]) -> list[str]:
    """`argv`, whose first word is the Python to install into or list, run with the spec's target Python:
    the venv's as written, or the base's located first (the rest of `argv` passed on unchanged)."""
    if not installs_into_base(python):
        return [f"{VENV_PREFIX}/bin/python", *argv[1:]]
    return ["/bin/sh", "-ec", f'{locate_base_python(python)}\nexec "${BASE_PYTHON_VAR}" "$@"', "envbuild-python", *argv[1:]]


def target_python_words(python: PythonEnv) -> str:
    """The target Python as a shell word, in shell text that ran locate_base_python first for a base target."""
    return f'"${BASE_PYTHON_VAR}"' if installs_into_base(python) else VENV_PREFIX + "/bin/python"
