"""`envrun kernel install/list/remove/run` and `envrun shell`: the thin executors around envbuild.kernel.

Each kernel and each shell is an envrun launch (envbuild.app.run.launch): the image found as envrun finds
it, the binds, $WITH_CONDA, the overlays, the recipe's environment, the thread counts for the CPUs of this
process (the job's inside an allocation). What the image provides is asked from inside it, through the
same launch (probe_python); ipykernel, when it lacks it, comes from a venv overlay built by `envbuild
build`'s own overlay session and kept in the build store's kernels/ directory for the image's next kernel.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from envbuild import __version__
from envbuild.app.run.launch import RunRequest, launch, plan_for
from envbuild.errors import EnvbuildError, UsageError
from envbuild.kernel.spec import (
    IPYKERNEL_MOUNT,
    KERNEL_FILE,
    KernelEntry,
    check_name,
    default_display_name,
    default_name,
    kernel_binds,
    kernel_command,
    kernel_overlays,
    kernels_dir,
    kernelspec,
    log_path,
    overlay_dir,
    overlay_spec_text,
    read_entry,
)

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

PROBE_TAG = "ENVRUN-PROBE "
# sh -c PROBE_SHELL envrun-probe PROBE_PYTHON MOUNT: the Python `envrun python` would run (python, else python3
# on the PATH envrun's shim leaves), its version, and whether it imports ipykernel (with MOUNT's site directory
# last on sys.path, as the kernel has it).
PROBE_SHELL = (
    'py=$(command -v python || command -v python3) || { echo "ENVRUN-PROBE {}"; exit 0; }\n'
    'exec "$py" -c "$1" "$py" "$2"\n'
)
PROBE_PYTHON = (
    "import importlib.util, json, sys\n"
    "if sys.argv[2]: sys.path.append('%s/lib/python%d.%d/site-packages' % ((sys.argv[2],) + sys.version_info[:2]))\n"
    "print('ENVRUN-PROBE ' + json.dumps({'python': sys.argv[1], 'executable': sys.executable,\n"
    "      'version': '%d.%d.%d' % sys.version_info[:3], 'ipykernel': importlib.util.find_spec('ipykernel') is not None}))\n"
)


@dataclass(frozen=True)
class KernelInstall:
    """What `envrun kernel install` asks for."""

    envrun: str  # the absolute path of the envrun the kernel runs
    image: str | None = None
    overlays: tuple[str, ...] = ()
    name: str | None = None
    display_name: str | None = None
    system: str | None = None
    binds: tuple[str, ...] = ()
    prefix: str | None = None  # None: the user's Jupyter data directory
    force: bool = False
    ipykernel_overlay: bool = True  # False: refuse an image without ipykernel


@dataclass(frozen=True)
class PythonProbe:
    python: str  # the path `command -v` gave, inside the container
    version: str
    ipykernel: bool


def install_kernel(request: KernelInstall, environ: Mapping[str, str], cwd: str, out: TextIO) -> str:
    """Write the kernelspec; the kernel's directory. Building the ipykernel overlay says so on `out`."""
    from envbuild.kernel.installed import user_data_dir
    from envbuild.launch.project import find_environment, image_and_overlays
    from envbuild.recipes.detect import resolve_recipe

    environment = find_environment(image=request.image, overlays=request.overlays, environ=environ, cwd=cwd)
    image, mounted, warnings, _ = image_and_overlays(environment, force=False)
    for warning in warnings:
        print(f"envrun: warning: {warning}", file=out)
    overlays = tuple(path for path, _ in mounted)
    name = check_name(request.name or default_name(image))
    target = kernels_dir(prefix=request.prefix, data_dir=user_data_dir())
    _require_writable(target, request.prefix)
    kernel_dir = os.path.join(target, name)
    if os.path.lexists(kernel_dir) and not request.force:
        raise UsageError(f"a kernel named {name} exists: {kernel_dir}",
                         f"pick another --name, or replace it with --force (`envrun kernel remove {name}` removes it)")
    recipe, _ = resolve_recipe(request.system, environ)
    base = RunRequest(command=[], image=image, overlays=list(overlays), binds=list(request.binds), system=request.system)
    probe = probe_python(base, environ, cwd)
    ipykernel_overlay = ""
    if not probe.ipykernel:
        if not request.ipykernel_overlay:
            raise UsageError(f"{image}{' with ' + ', '.join(overlays) if overlays else ''}: its Python {probe.python} "
                             "has no ipykernel",
                             "leave out --no-ipykernel-overlay (envrun then builds a small overlay with ipykernel), or "
                             "add ipykernel to the image or to an overlay (--overlay)")
        from envbuild.host.runtime import cache_dir_path

        print(f"envrun: {probe.python} in {image} has no ipykernel: adding a venv overlay with it, built for the image's "
              "Python (once per image; the next kernel of this image reuses it)", file=out, flush=True)
        ipykernel_overlay = build_ipykernel_overlay(image, recipe.name, cache_dir_path(dict(environ)), out)
        with_overlay = RunRequest(command=[], image=image, overlays=[ipykernel_overlay, *overlays],
                                  binds=list(request.binds), system=request.system)
        probe = probe_python(with_overlay, environ, cwd, mount=IPYKERNEL_MOUNT)
        if not probe.ipykernel:
            raise EnvbuildError(f"the ipykernel overlay {ipykernel_overlay} was built, but {probe.python} in {image} "
                                "still cannot import ipykernel", "report this; the overlay's build log lies next to it")
    entry = KernelEntry(name=name, display_name=request.display_name or default_display_name(image), image=image,
                        overlays=overlays, ipykernel_overlay=ipykernel_overlay, python=os.path.basename(probe.python),
                        system=request.system or "", binds=tuple(os.path.abspath(b.split(":", 1)[0]) + _after(b)
                                                                 for b in request.binds),
                        log=log_path(name, environ), envrun=request.envrun)
    _write_kernel(kernel_dir, kernelspec(entry, kernel_dir, __version__), replace=request.force)
    print(f"installed kernel {name} ({entry.display_name}) in {kernel_dir}\n"
          f"  image: {image}\n" + "".join(f"  overlay: {o}\n" for o in overlays)
          + (f"  ipykernel from: {ipykernel_overlay}\n" if ipykernel_overlay else "")
          + f"  Python: {probe.python} (Python {probe.version})\n  log: {entry.log}", file=out)
    if request.prefix:
        print(f"  Jupyter finds it with JUPYTER_PATH={os.path.dirname(target)}", file=out)
    return kernel_dir


def _after(bind: str) -> str:
    _, colon, rest = bind.partition(":")
    return colon + rest


def _require_writable(target: str, prefix: str | None) -> None:
    where = f"--prefix {prefix}" if prefix else "the user's Jupyter data directory ($JUPYTER_DATA_DIR)"
    fix = ("pick a directory you may write: --prefix DIR (Jupyter then needs DIR/share/jupyter in $JUPYTER_PATH), or "
           "leave out --prefix for your own data directory" if prefix else
           "set JUPYTER_DATA_DIR to a directory you may write, or use --prefix DIR")
    try:
        os.makedirs(target, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot write kernelspecs to {target} ({where}): {exc.strerror}", fix) from None
    if not os.access(target, os.W_OK | os.X_OK):
        raise UsageError(f"cannot write kernelspecs to {target} ({where}): not writable", fix)


def _write_kernel(kernel_dir: str, spec: dict[str, object], *, replace: bool) -> None:
    """kernel.json in a directory of its own, made beside it and renamed into place."""
    from envbuild.safefiles import atomic_write

    partial = f"{kernel_dir}.partial-{os.getpid()}"
    shutil.rmtree(partial, ignore_errors=True)
    os.makedirs(partial)
    try:
        atomic_write(os.path.join(partial, KERNEL_FILE), json.dumps(spec, indent=1) + "\n")
        if replace and os.path.lexists(kernel_dir):
            _remove_path(kernel_dir)
        os.rename(partial, kernel_dir)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise


def _remove_path(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    else:
        os.unlink(path)


def probe_python(base: RunRequest, environ: Mapping[str, str], cwd: str, *, mount: str = "") -> PythonProbe:
    """Ask the image (with envrun's environment) for its Python; UsageError when it has none or cannot start."""
    request = RunRequest(command=["sh", "-c", PROBE_SHELL, "envrun-probe", PROBE_PYTHON, mount], image=base.image,
                         overlays=base.overlays, binds=base.binds, system=base.system)
    result = run_launch(request, environ, cwd, timeout=600)
    lines = [line for line in result.stdout.splitlines() if line.startswith(PROBE_TAG)]
    where = f"{base.image}{' with ' + ', '.join(base.overlays) if base.overlays else ''}"
    if not lines:
        said = (result.stderr.strip() or result.stdout.strip())[-2000:]
        raise UsageError(f"could not start a shell and Python in {where} (exit status {result.returncode}): {said}",
                         "check that `envrun --image IMG python -c 1` works (`envrun doctor` finds what is wrong)")
    found = json.loads(lines[-1][len(PROBE_TAG):])
    if not found.get("python"):
        raise UsageError(f"no Python in {where}: neither python nor python3 is on the PATH of its environment "
                         "(with $WITH_CONDA activated and the overlays' venvs on PATH, as envrun runs it)",
                         "use an image that has Python, or add the overlay whose venv has it with --overlay")
    return PythonProbe(python=str(found["python"]), version=str(found.get("version", "")),
                       ipykernel=bool(found.get("ipykernel")))


def run_launch(request: RunRequest, environ: Mapping[str, str], cwd: str, *, timeout: float) -> subprocess.CompletedProcess[str]:
    """Run one envrun launch as a child and capture its output (the launch path's plan, with this environment)."""
    plan = plan_for(request, environ, cwd)
    env = {key: value for key, value in environ.items() if key not in plan.unset}
    env.update(dict(plan.env))
    try:
        return subprocess.run(list(plan.argv), env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL, check=False)
    except FileNotFoundError:
        raise UsageError(f"{plan.argv[0]} is not on PATH", "load apptainer (or singularity) or fix PATH") from None


def build_ipykernel_overlay(image: str, system: str, store_root: str, out: TextIO) -> str:
    """The ipykernel overlay of `image`: `envbuild build` of a generated overlay spec, output in the store's
    kernels/ directory. An unchanged one is up to date in a moment (the build's own check)."""
    from envbuild.app.build.command import run_build
    from envbuild.app.build.request import BuildOptions
    from envbuild.safefiles import atomic_write
    from envbuild.spec.load import load_spec

    home = overlay_dir(store_root, image)
    os.makedirs(home, exist_ok=True)
    spec_path = os.path.join(home, "ipykernel.yaml")
    text = overlay_spec_text(image, system)
    if _read_text(spec_path) != text:
        atomic_write(spec_path, text)
    output = os.path.join(home, "ipykernel.sqsh")
    run_build(load_spec(Path(spec_path)), BuildOptions(output=Path(output), cache_dir=Path(store_root)), out,
              dry_run=False)
    return output


def _read_text(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except OSError:
        return ""


# -- list and remove ----------------------------------------------------------------------------------------------


def list_kernels(prefixes: Sequence[str], out: TextIO) -> int:
    """Print envrun's kernels: name, whether its image (and overlays) exist, the image, the directory, the log."""
    from envbuild.kernel.installed import installed_kernels, search_dirs

    ours = [kernel for kernel in installed_kernels(prefixes) if kernel.ours]
    if not ours:
        print("no kernels installed by envrun; looked in:\n" + "".join(f"  {d}\n" for d in search_dirs(prefixes))
              + "install one with `envrun kernel install`", file=out)
        return 0
    for kernel in ours:
        entry = kernel.entry
        if entry is None:
            print(f"{kernel.name}  UNREADABLE  {kernel.problem}\n  dir: {kernel.directory}", file=out)
            continue
        missing = [path for path in (entry.image, *kernel_overlays(entry)) if not os.path.exists(path)]
        state = "ok" if not missing else "MISSING " + ", ".join(missing)
        print(f"{kernel.name}  {state}\n  display name: {entry.display_name}\n  image: {entry.image}\n"
              + "".join(f"  overlay: {o}\n" for o in entry.overlays)
              + (f"  ipykernel from: {entry.ipykernel_overlay}\n" if entry.ipykernel_overlay else "")
              + f"  dir: {kernel.directory}\n  log: {entry.log}", file=out)
    return 0


def remove_kernel(name: str, prefixes: Sequence[str], out: TextIO) -> None:
    """Remove the kernel's directory and log, and its image's ipykernel overlay when no other kernel found uses it."""
    from envbuild.kernel.installed import installed_kernels, search_dirs

    kernels = installed_kernels(prefixes)
    named = [kernel for kernel in kernels if kernel.name == name]
    ours = [kernel for kernel in named if kernel.ours]
    if not ours:
        if named:
            raise UsageError(f"the kernel {name} ({named[0].directory}) was not installed by envrun",
                             f"remove it with Jupyter's own command: jupyter kernelspec remove {name}")
        raise UsageError(f"no kernel named {name} in " + ", ".join(search_dirs(prefixes)),
                         "`envrun kernel list` shows envrun's kernels (add --prefix DIR for one installed with --prefix)")
    kernel = ours[0]
    _remove_path(kernel.directory)
    print(f"removed kernel {name}: {kernel.directory}", file=out)
    entry = kernel.entry
    if entry is None:
        return
    for path in (entry.log, entry.log + ".1"):
        if os.path.lexists(path):
            os.unlink(path)
            print(f"removed its log {path}", file=out)
    overlay = entry.ipykernel_overlay
    others = [k for k in kernels if k.entry is not None and k is not kernel and k.entry.ipykernel_overlay == overlay]
    if overlay and os.path.basename(os.path.dirname(os.path.dirname(overlay))) == "kernels" and not others:
        shutil.rmtree(os.path.dirname(overlay), ignore_errors=True)
        print(f"removed the ipykernel overlay {os.path.dirname(overlay)} (no other kernel uses it; the build store "
              "keeps its copy: `envbuild cache` manages that)", file=out)
    elif overlay:
        print(f"kept the ipykernel overlay {overlay}: used by " + ", ".join(k.name for k in others), file=out)


# -- the kernel process ---------------------------------------------------------------------------------------------


def run_kernel(kernel_file: str, connection_file: str, environ: Mapping[str, str], cwd: str) -> None:
    """What a kernelspec of envrun's runs: the kernel inside the image (this process becomes it), its stderr
    appended to the kernel's log. When it cannot start, a stand-in kernel (envbuild.kernel.errorkernel) shows
    the reason in the notebook."""
    entry: KernelEntry | None = None
    try:
        try:
            with open(kernel_file, encoding="utf-8") as handle:
                spec = json.load(handle)
        except (OSError, ValueError) as exc:
            raise UsageError(f"cannot read the kernelspec {kernel_file}: {exc}",
                             "install the kernel again: envrun kernel install --force ...") from None
        entry = read_entry(spec if isinstance(spec, dict) else {}, kernel_file)
        _log_to(entry.log, f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} envrun kernel {entry.name} starting "
                           f"(pid {os.getpid()}): image {entry.image}\n")
        if not os.path.exists(entry.image):
            raise UsageError(f"the image {entry.image} of the kernel {entry.name} does not exist (moved or deleted?)",
                             f"put it back, or point the kernel at its new place: {reinstall_command(entry)}")
        launch(RunRequest(command=kernel_command(entry, connection_file), image=entry.image,
                          overlays=kernel_overlays(entry), binds=kernel_binds(entry, connection_file),
                          system=entry.system or None))
    except EnvbuildError as exc:
        name = entry.name if entry else os.path.basename(os.path.dirname(kernel_file))
        message = f"envrun kernel {name} could not start.\n{exc.render()}"
        if entry is not None and reinstall_command(entry) not in (exc.hint or ""):
            message += f"\n  or install the kernel again: {reinstall_command(entry)}"
        if entry is not None:
            message += f"\n(kernel log: {entry.log}; kernelspec: {kernel_file})"
        print(message, file=sys.stderr, flush=True)
        from envbuild.kernel.errorkernel import serve_error

        serve_error(connection_file, message)


def reinstall_command(entry: KernelEntry) -> str:
    from shlex import quote

    words = [entry.envrun or "envrun", "kernel", "install", "--force", "--name", entry.name, "--image", entry.image]
    for overlay in entry.overlays:
        words += ["--overlay", overlay]
    if entry.system:
        words += ["--system", entry.system]
    return " ".join(quote(word) for word in words)


def _log_to(path: str, header: str) -> None:
    """Append this process's stderr (and the kernel's, after exec) to `path`; the previous log is kept as
    PATH.1 once it passes a few MB. Left as it is when the log cannot be written."""
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if os.path.exists(path) and os.path.getsize(path) > _LOG_KEEP_BYTES:
            os.replace(path, path + ".1")
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    except OSError as exc:
        sys.stderr.write(f"envrun: cannot write the kernel log {path}: {exc.strerror}\n")
        return
    sys.stderr.flush()
    os.dup2(descriptor, 2)
    os.close(descriptor)
    sys.stderr.write(header)
    sys.stderr.flush()


_LOG_KEEP_BYTES = 4 * 1024 * 1024


# -- envrun shell ---------------------------------------------------------------------------------------------------


def run_shell(request: RunRequest, command: str | None, environ: Mapping[str, str], cwd: str) -> None:
    """`envrun shell`: bash (else sh) in the image through envrun's launch path; this process becomes it."""
    from envbuild.kernel.shell import shell_command

    image = _image_of(request, environ, cwd)
    request.command = shell_command(image, command)
    launch(request)


def _image_of(request: RunRequest, environ: Mapping[str, str], cwd: str) -> str:
    from envbuild.launch.project import find_environment, image_and_overlays

    environment = find_environment(image=request.image, overlays=request.overlays, environ=environ, cwd=cwd,
                                   warn=lambda ignored: None)  # the launch warns, once
    return image_and_overlays(environment, request.force_overlay)[0]
