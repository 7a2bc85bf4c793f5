"""The kernelspec envrun writes, and what a kernel it wrote runs: pure, from plain values.

A kernelspec is a directory holding `kernel.json` (Jupyter's format: argv, display_name, language,
metadata). Ours runs envrun itself, by the absolute path of the envrun that installed it:

    ["/abs/envrun", "kernel", "run", "<kernel dir>/kernel.json", "{connection_file}"]

and keeps what the kernel runs in (image, overlays, system, binds, where its log goes) under
`metadata.envrun`, fixed at install time. `envrun kernel run` reads it back (read_entry) and launches
kernel_command inside the image the way `envrun python` launches: nothing of envrun's environment is
copied into the kernelspec, so a change of the user's envrun config or of the recipe applies to the
next kernel start, as it does to the next job.

When neither the image nor the overlays have ipykernel, a small venv overlay with it (built by the
overlay machinery, envbuild.builder.plan.overlayplan) is mounted at IPYKERNEL_MOUNT, under the user's overlays.
Its site directory is put at the *end* of sys.path by KERNEL_LAUNCHER: the Python the kernel runs is the
one `envrun python` runs (the top overlay's venv when there is one), which keeps its own packages first
and takes from the ipykernel overlay only what it lacks.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from envbuild.shared.errors import UsageError

if TYPE_CHECKING:
    from collections.abc import Mapping

KERNEL_FILE = "kernel.json"
METADATA_KEY = "envrun"  # kernel.json's metadata.envrun: what marks a kernel as envrun's
ENTRY_FORMAT = 1
IPYKERNEL_MOUNT = "/opt/envrun-ipykernel"
# jupyter_client.kernelspec's own rule for a kernel's directory name (it lowercases names on install).
_NAME = re.compile(r"^[a-z0-9._-]+$")

# Run by the image's Python when ipykernel comes from the overlay: $1 is the overlay's mount. Like
# ipykernel_launcher, it drops the empty entry (the working directory) from sys.path first.
KERNEL_LAUNCHER = (
    "import sys\n"
    "if sys.path and sys.path[0] == '': del sys.path[0]\n"
    "sys.path.append('%s/lib/python%d.%d/site-packages' % ((sys.argv.pop(1),) + sys.version_info[:2]))\n"
    "from ipykernel import kernelapp\n"
    "kernelapp.launch_new_instance()\n"
)


@dataclass(frozen=True)
class KernelEntry:
    """What one installed kernel runs in, as kernel.json's metadata.envrun keeps it."""

    name: str
    display_name: str
    image: str  # absolute
    overlays: tuple[str, ...]  # the user's, absolute, bottom first
    ipykernel_overlay: str  # "" when the image or an overlay has ipykernel
    python: str  # the command the image's environment runs: python or python3 (found on PATH at each start)
    system: str  # "" : detected at each start, as envrun does
    binds: tuple[str, ...]
    log: str  # the kernel's stderr (absolute)
    envrun: str  # the envrun that installed it (absolute)


def default_name(image: str) -> str:
    """envrun-<image file name without .sif>, made a valid kernel name."""
    stem = os.path.basename(image)
    stem = stem[: -len(".sif")] if stem.endswith(".sif") else stem
    slug = re.sub(r"[^a-z0-9._-]+", "-", stem.lower()).strip("-.") or "image"
    return f"envrun-{slug}"


def default_display_name(image: str) -> str:
    stem = os.path.basename(image)
    return f"{stem[: -len('.sif')] if stem.endswith('.sif') else stem} (envrun)"


def check_name(name: str) -> str:
    """A kernel name Jupyter accepts as it is (it would lowercase another one, and the name is a directory)."""
    if not _NAME.match(name) or name in (".", ".."):
        suggestion = re.sub(r"[^a-z0-9._-]+", "-", name.lower()).strip("-.") or "envrun-kernel"
        raise UsageError(f"kernel name {name!r}: Jupyter kernel names are lowercase letters, digits, '.', '_' and '-'",
                         f"use --name {suggestion}")
    return name


def kernels_dir(*, prefix: str | None, data_dir: str) -> str:
    """Where Jupyter looks for kernelspecs: DATA_DIR/kernels for the user (jupyter_core's jupyter_data_dir), or
    PREFIX/share/jupyter/kernels, as `jupyter kernelspec install --prefix` puts them."""
    if prefix:
        return os.path.join(os.path.abspath(prefix), "share", "jupyter", "kernels")
    return os.path.join(data_dir, "kernels")


LOG_DIR = ("envrun", "kernels")  # the kernels' logs, below the user's state directory


def state_home(environ: Mapping[str, str]) -> str:
    """$XDG_STATE_HOME, else ~/.local/state (XDG: state is what outlives a restart but is no user data; a log
    is its example)."""
    return environ.get("XDG_STATE_HOME") or os.path.join(environ.get("HOME") or os.path.expanduser("~"), ".local", "state")


def log_path(name: str, environ: Mapping[str, str]) -> str:
    """STATE/envrun/kernels/NAME.log (state_home)."""
    return os.path.join(state_home(environ), *LOG_DIR, log_name(name))


def log_name(name: str) -> str:
    return f"{name}.log"


def log_place(log: str, name: str) -> str | None:
    """The state directory of a kernel's `log` as kernel.json names it, when the log has the shape envrun
    gives it (STATE/envrun/kernels/NAME.log, NAME a kernel name); else None. A kernel.json in a prefix others
    may write could name any file as its log: envrun writes a log only at such a place."""
    directory, file_name = os.path.split(log)
    state, tail = os.path.split(directory)
    state, top = os.path.split(state)
    if not (_NAME.match(name) and name not in (".", "..") and file_name == log_name(name) and (top, tail) == LOG_DIR
            and os.path.isabs(log)):
        return None
    return state


def kernelspec(entry: KernelEntry, kernel_dir: str, version: str) -> dict[str, object]:
    """kernel.json's content."""
    return {
        "argv": [entry.envrun, "kernel", "run", os.path.join(kernel_dir, KERNEL_FILE), "{connection_file}"],
        "display_name": entry.display_name,
        "language": "python",
        "interrupt_mode": "signal",
        "metadata": {METADATA_KEY: {
            "format": ENTRY_FORMAT, "name": entry.name, "image": entry.image, "overlays": list(entry.overlays),
            "ipykernel_overlay": entry.ipykernel_overlay, "python": entry.python, "system": entry.system,
            "binds": list(entry.binds), "log": entry.log, "envrun": entry.envrun, "installed_by": f"envrun {version}",
        }},
    }


def is_envrun_kernel(spec: Mapping[str, object]) -> bool:
    metadata = spec.get("metadata")
    return isinstance(metadata, dict) and isinstance(metadata.get(METADATA_KEY), dict)


def read_entry(spec: Mapping[str, object], where: str) -> KernelEntry:
    """The entry of a kernel.json envrun wrote; UsageError naming `where` for any other."""
    metadata = spec.get("metadata")
    data = metadata.get(METADATA_KEY) if isinstance(metadata, dict) else None
    fix = "install the kernel again: envrun kernel install --force --name NAME ..."
    if not isinstance(data, dict):
        raise UsageError(f"{where} is not a kernel envrun installed (no metadata.{METADATA_KEY})", fix)
    if data.get("format") != ENTRY_FORMAT:
        raise UsageError(f"{where}: metadata.{METADATA_KEY} has format {data.get('format')!r}, this envrun reads "
                         f"{ENTRY_FORMAT}", fix)

    def text(key: str) -> str:
        value = data.get(key, "")
        if not isinstance(value, str):
            raise UsageError(f"{where}: metadata.{METADATA_KEY}.{key} is not text", fix)
        return value

    def texts(key: str) -> tuple[str, ...]:
        value = data.get(key, [])
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise UsageError(f"{where}: metadata.{METADATA_KEY}.{key} is not a list of text", fix)
        return tuple(value)

    display = spec.get("display_name")
    return KernelEntry(name=text("name"), display_name=display if isinstance(display, str) else text("name"),
                       image=text("image"), overlays=texts("overlays"), ipykernel_overlay=text("ipykernel_overlay"),
                       python=text("python") or "python", system=text("system"), binds=texts("binds"),
                       log=text("log"), envrun=text("envrun"))


def kernel_overlays(entry: KernelEntry) -> list[str]:
    """The overlays the kernel mounts, bottom first: the ipykernel overlay under the user's (see the module's
    docstring for why that order and the end of sys.path)."""
    return [*((entry.ipykernel_overlay,) if entry.ipykernel_overlay else ()), *entry.overlays]


def kernel_command(entry: KernelEntry, connection_file: str) -> list[str]:
    """The program the kernel runs inside the image."""
    if entry.ipykernel_overlay:
        return [entry.python, "-c", KERNEL_LAUNCHER, IPYKERNEL_MOUNT, "-f", connection_file]
    return [entry.python, "-m", "ipykernel_launcher", "-f", connection_file]


def kernel_binds(entry: KernelEntry, connection_file: str) -> list[str]:
    """The kernel's binds: the installed ones and the directory of the connection file (Jupyter's runtime
    directory), which the kernel must read inside the container wherever it lies."""
    return [*entry.binds, os.path.dirname(os.path.abspath(connection_file))]


def overlay_spec_text(image: str, system: str) -> str:
    """The spec of the ipykernel overlay for `image` (an overlay spec, envs/lumi-overlay.yaml's kind)."""
    return (
        "# Written by `envrun kernel install`: ipykernel for an image that lacks it, as a venv overlay.\n"
        "name: envrun-ipykernel\n"
        f"system: {system}\n"
        f"base: 'localimage:{image.replace(chr(39), chr(39) * 2)}'\n"
        f"overlay: {{mount: {IPYKERNEL_MOUNT}}}\n"
        "python:\n"
        "  packages: [ipykernel]\n"
        "tests:\n"
        "  - python -c \"import ipykernel\"\n"
    )


def overlay_dir(store_root: str, image: str) -> str:
    """Where the ipykernel overlay of `image` is kept: one directory per image path in the build store's
    kernels/ (the overlay's key names the image's path too, so each path gets its own)."""
    import hashlib

    stem = os.path.basename(image)
    stem = re.sub(r"[^A-Za-z0-9._-]+", "-", stem[: -len(".sif")] if stem.endswith(".sif") else stem)[:40]
    return os.path.join(store_root, "kernels", f"{stem}-{hashlib.sha256(image.encode()).hexdigest()[:12]}")
