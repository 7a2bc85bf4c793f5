"""Which Python a base image has and what it already provides, asked from inside the image once.

An overlay's venv must be made by the base's own Python, and "what the base already has" decides what
the overlay installs. Both are facts of the image, not of the spec, so a small script runs inside the
base (read-only, nothing written into it) and writes them as JSON; the pure overlay planner
(envbuild.builder.plan.overlayplan) reads them as a BaseProbe. The result is cached per base digest.

The Python, in order (LUMI AI guide, laifs-container-recipes):
  1. overlay.python in the spec (for an image spec whose python.target uses the base's Python: its
     python.interpreter, looked up on the base's PATH as the build finds it);
  2. the conda env that $WITH_CONDA activates (LUMI's lumi-pytorch-rocm-* images), run with bash as
     the LUMI course does (`bash -c '$WITH_CONDA; ...'`): /bin/sh may be dash, which has no `source`;
  3. /opt/venv (LUMI AI Factory images);
  4. envbuild's own venv (an image envbuild built);
  5. python3 on the image's PATH.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass

from envbuild.builder.plan.pythontarget import WITH_CONDA_LOOKUP
from envbuild.envspec.specmodel import VENV_PREFIX
from envbuild.shared.errors import EnvbuildError

# $1: the spec's overlay.python or "", $2: where to write the JSON (inside the container), $3: PROBE_PYTHON,
# $4 (optional): why $1 was given. A $1 without a slash is looked up on the image's PATH (else `python`): the Python
# the base puts first on its PATH, for python.target: base / venv-over-base (TARGET_PROBE_SHELL).
PROBE_SHELL = f"""\
override=$1; out=$2; probe=$3; activation=
if [ -n "$override" ]; then
    case $override in
        */*) python=$override ;;
        *) python=$(command -v "$override" || command -v python) || {{
               echo "no $override or python on the image's PATH ($PATH)" >&2; exit 3; }} ;;
    esac
    why=${{4:-"overlay.python in the spec"}}
elif [ -n "${{WITH_CONDA:-}}" ]; then
    command -v bash >/dev/null 2>&1 || {{ echo "the image sets WITH_CONDA=$WITH_CONDA but has no bash to run it" >&2; exit 3; }}
    python=$(bash -c 'eval "$WITH_CONDA" >&2 && command -v python') || {{
        echo "the image's \\$WITH_CONDA ($WITH_CONDA) failed to activate its conda env" >&2; exit 3; }}
    why="the conda env that \\$WITH_CONDA activates ($WITH_CONDA)"; activation=WITH_CONDA
elif [ -x /opt/venv/bin/python ]; then
    python=/opt/venv/bin/python; why="/opt/venv, the LUMI AI Factory layout"
elif [ -x {VENV_PREFIX}/bin/python ]; then
    python={VENV_PREFIX}/bin/python; why="the venv of an envbuild image"
else
    python=$(command -v python3) || {{ echo "no python3 on the image's PATH" >&2; exit 3; }}
    why="python3 on the image's PATH"
fi
[ -x "$python" ] || {{ echo "$python is not an executable file in the image" >&2; exit 3; }}
if [ -n "$activation" ]; then
    exec bash -c 'eval "$WITH_CONDA" >&2 && exec "$@"' envbuild-probe "$python" -c "$probe" "$python" "$why" "$activation" "$out"
fi
exec "$python" -c "$probe" "$python" "$why" "$activation" "$out"
"""

# PROBE_SHELL for the lock of a python.target that uses the base's Python: the interpreter ($1, a name) is looked up
# as the build looks it up (envbuild.builder.plan.pythontarget.locate_base_python): after the image's $WITH_CONDA
# where it sets one, and run by its path, as the build runs it.
TARGET_PROBE_SHELL = f"""\
case $1 in */*) ;; *)
    if [ -n "${{WITH_CONDA:-}}" ]; then
        found=$(bash -c {shlex.quote(WITH_CONDA_LOOKUP)} "$1" python) || {{
            echo "no $1 or python on the PATH the image's \\$WITH_CONDA ($WITH_CONDA) gives" >&2; exit 3; }}
        set -- "$found" "$2" "$3" "$4, after the image's \\$WITH_CONDA ($WITH_CONDA)"
    fi ;;
esac
""" + PROBE_SHELL

# Runs with the chosen Python (any 3.x that has importlib.metadata, i.e. 3.8+).
PROBE_PYTHON = """\
import importlib.metadata as md, importlib.util, json, os, platform, re, sys, sysconfig
python, why, activation, out = sys.argv[1:5]
names = {}
for dist in md.distributions():
    name = dist.metadata["Name"]
    key = re.sub(r"[-_.]+", "-", name or "").lower()  # PEP 503: Foo_Bar and foo-bar are one distribution
    if name and key not in names:  # the first on sys.path is the one imported
        names[key] = name + "==" + dist.version
sites = [p for p in sys.path if p.rstrip("/").endswith(("site-packages", "dist-packages")) and os.path.isdir(p)]
info = {
    "path": python, "why": why, "activation": activation, "executable": sys.executable,
    "version": "%d.%d.%d" % sys.version_info[:3], "abi": sysconfig.get_config_var("SOABI") or "",
    "prefix": sys.prefix, "site_dirs": sites, "packages": sorted(names.values()),
    "has_venv": importlib.util.find_spec("venv") is not None, "machine": platform.machine(),
    "glibc": (os.confstr("CS_GNU_LIBC_VERSION") or "").replace("glibc ", "") if hasattr(os, "confstr") else "",
}
with open(out, "w") as handle:
    json.dump(info, handle, indent=2, sort_keys=True)
"""


@dataclass(frozen=True)
class BaseProbe:
    """The base image's Python and what its environment has installed."""

    python: str  # the interpreter the venv is made with (path inside the image)
    why: str  # how it was chosen, for the build's report
    activation: str  # "WITH_CONDA" when $WITH_CONDA must run first, else ""
    version: str  # 3.12.3
    abi: str  # cpython-312-x86_64-linux-gnu
    prefix: str  # the base environment (sys.prefix)
    site_dirs: tuple[str, ...]  # the base Python's site directories, in sys.path order
    packages: tuple[str, ...]  # name==version of every distribution the base Python sees
    machine: str = ""
    glibc: str = ""  # "2.36"; "" when the C library is not glibc (a lock needs it for the wheel platform)

    @property
    def minor(self) -> str:
        return ".".join(self.version.split(".")[:2])

    def installed(self) -> dict[str, tuple[str, str]]:
        """canonical name -> (name as written, version)."""
        from packaging.utils import canonicalize_name

        found: dict[str, tuple[str, str]] = {}
        for line in self.packages:
            name, _, version = line.partition("==")
            found.setdefault(canonicalize_name(name), (name, version))
        return found

    def as_record(self) -> dict[str, str]:
        return {"path": self.python, "version": self.version, "abi": self.abi, "env": self.prefix,
                "activation": self.activation, "why": self.why}


def parse_probe(text: str, where: str) -> BaseProbe:
    """The probe's JSON as a BaseProbe; a clear error when the file is not what the script writes."""
    try:
        data = json.loads(text)
        if not isinstance(data, dict):
            raise TypeError(f"a JSON {type(data).__name__}, not an object")
        if not data.get("has_venv", True):
            raise EnvbuildError(
                f"the base's Python {data['path']} has no venv module, so no overlay venv can be made with it",
                "choose another interpreter with overlay: {python: /path/in/image/bin/python}, or install the "
                "venv module in the base (Debian: python3-venv)")
        return BaseProbe(
            python=data["path"], why=data["why"], activation=data["activation"], version=data["version"],
            abi=data["abi"], prefix=data["prefix"], site_dirs=tuple(data["site_dirs"]),
            packages=tuple(data["packages"]), machine=data.get("machine", ""), glibc=data.get("glibc", ""),
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise EnvbuildError(f"{where}: unreadable result of the base image probe ({exc})",
                            "remove the file and build again; report a bug if it comes back") from None


def in_base(probe: BaseProbe, argv: list[str]) -> list[str]:
    """`argv` run inside the base the way the base's Python expects: after $WITH_CONDA when it needs it."""
    if probe.activation != "WITH_CONDA":
        return argv
    return ["bash", "-c", 'eval "$WITH_CONDA" >&2 || exit 3; exec "$@"', "envbuild-activate", *argv]
