"""`envrun kernel install/list/remove/run` and `envrun shell`: the thin executors around envbuild.kernel.

Each kernel and each shell is an envrun launch (envbuild.commands.launch): the image found as envrun finds
it, the binds, $WITH_CONDA, the overlays, the recipe's environment, the thread counts for the CPUs of this
process (the job's inside an allocation). What the image provides is asked from inside it, through the
same launch (probe_python); ipykernel, when it lacks it, comes from a venv overlay built by `envbuild
build`'s own overlay session and kept in the build store's kernels/ directory for the image's next kernel.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from envbuild import __version__
from envbuild.commands.launch import RunRequest, launch, plan_for
from envbuild.kernel.kernelspec import (
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
from envbuild.shared.errors import EnvbuildError, UsageError

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from envbuild.kernel.installed import InstalledKernel

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
    from envbuild.recipes.ops import system_argument

    environment = find_environment(image=request.image, overlays=request.overlays, environ=environ, cwd=cwd)
    image, mounted, warnings, _ = image_and_overlays(environment, force=False)
    for warning in warnings:
        print(f"envrun: warning: {warning}", file=out)
    overlays = tuple(path for path, _ in mounted)
    name = check_name(request.name or default_name(image))
    target = kernels_dir(prefix=request.prefix, data_dir=user_data_dir())
    _require_writable(target, request.prefix)
    kernel_dir = os.path.join(target, name)
    if _lexists_in(target, name) and not request.force:
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
                        system=system_argument(recipe) if request.system else "",  # a file absolute: kernels start elsewhere
                        binds=tuple(os.path.abspath(b.split(":", 1)[0]) + _after(b) for b in request.binds),
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
    from envbuild.shared.safefiles import make_dirs

    where = f"--prefix {prefix}" if prefix else "the user's Jupyter data directory ($JUPYTER_DATA_DIR)"
    fix = ("pick a directory you may write: --prefix DIR (Jupyter then needs DIR/share/jupyter in $JUPYTER_PATH), or "
           "leave out --prefix for your own data directory" if prefix else
           "set JUPYTER_DATA_DIR to a directory you may write, or use --prefix DIR")
    try:
        make_dirs(target)
    except OSError as exc:
        raise UsageError(f"cannot write kernelspecs to {target} ({where}): {exc.strerror}", fix) from None
    if not os.access(target, os.W_OK | os.X_OK):
        raise UsageError(f"cannot write kernelspecs to {target} ({where}): not writable", fix)


def _lexists_in(directory: str, name: str) -> bool:
    try:
        os.stat(os.path.join(directory, name), follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def _write_kernel(kernel_dir: str, kernel_json: dict[str, object], *, replace: bool) -> None:
    """kernel.json in a directory of its own, made beside it under an unpredictable name and renamed into
    place, all within the kernels directory's descriptor: in a prefix others may write, nothing is written
    through a link planted there. With `replace`, the kernel there is removed first, when it is the user's
    own (as `envrun kernel remove` removes it)."""
    import secrets

    from envbuild.shared.safefiles import open_dir, remove_tree_at, rename_at, subdir, write_file

    target, name = os.path.split(kernel_dir)
    target_fd = open_dir(target)
    try:
        partial = f".{name}.{secrets.token_hex(6)}.partial"
        partial_fd = subdir(target_fd, partial, create=True, mode=0o755, where=os.path.join(target, partial))
        try:
            try:
                write_file(KERNEL_FILE, json.dumps(kernel_json, indent=1) + "\n", dir_fd=partial_fd)
            finally:
                os.close(partial_fd)
            if replace:
                found = _own_kernel_dir(target_fd, target, name)
                if isinstance(found, str):
                    raise UsageError(f"cannot replace the kernel {name} in {target}: {found}",
                                     f"install it under another name (--name), or ask its owner to remove {kernel_dir}")
                if found is not None:
                    _remove_kernel_dir(target_fd, name, found)
            rename_at(target_fd, partial, target_fd, name)
        except BaseException:
            remove_tree_at(target_fd, partial)
            raise
    finally:
        os.close(target_fd)


def _own_kernel_dir(kernels_fd: int, kernels: str, name: str) -> int | str | None:
    """The kernel directory `name` in `kernels_fd` opened without following a link, when it is the user's own
    (a descriptor); None when nothing is there; else why it is not the user's to remove."""
    import stat

    try:
        info = os.stat(name, dir_fd=kernels_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(info.st_mode):
        return f"{os.path.join(kernels, name)} is a symbolic link, not a kernel directory"
    if not stat.S_ISDIR(info.st_mode):
        return f"{os.path.join(kernels, name)} is not a directory"
    try:
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=kernels_fd)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"{os.path.join(kernels, name)} cannot be opened ({exc.strerror})"
    owner = os.fstat(fd).st_uid
    if owner != os.geteuid():
        os.close(fd)
        return f"{os.path.join(kernels, name)} belongs to {_user_name(owner)}, not to you"
    return fd


def _user_name(uid: int) -> str:
    import pwd

    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def _remove_kernel_dir(kernels_fd: int, name: str, fd: int) -> None:
    """Empty the checked kernel directory through its descriptor (never crossing a link in it), then remove
    its name (if it was swapped since, what is there is removed without crossing a link either)."""
    from envbuild.shared.safefiles import empty_dir, remove_tree_at

    try:
        empty_dir(fd)
    finally:
        os.close(fd)
    remove_tree_at(kernels_fd, name)


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
    from envbuild.builder.sessions.buildrequest import BuildOptions
    from envbuild.commands.build import run_build
    from envbuild.envspec.loadspec import load_spec
    from envbuild.shared.safefiles import open_below, write_file

    home = overlay_dir(store_root, image)
    spec_path = os.path.join(home, "ipykernel.yaml")
    text = overlay_spec_text(image, system)
    home_fd = open_below(store_root, ("kernels", os.path.basename(home)), create=True)
    try:
        if _read_text(home_fd, "ipykernel.yaml") != text:
            write_file("ipykernel.yaml", text, dir_fd=home_fd)
    finally:
        os.close(home_fd)
    output = os.path.join(home, "ipykernel.sqsh")
    run_build(load_spec(Path(spec_path)), BuildOptions(output=Path(output), cache_dir=Path(store_root)), out,
              dry_run=False)
    return output


def _read_text(dir_fd: int, name: str) -> str:
    from envbuild.shared.safefiles import read_file_nofollow

    try:
        return read_file_nofollow(dir_fd, name)[0].decode("utf-8", errors="replace")
    except (OSError, EnvbuildError):
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


def remove_kernel(name: str, prefixes: Sequence[str], out: TextIO, environ: Mapping[str, str] | None = None) -> None:
    """Remove the user's own kernel `name`: its directory, its log, and its image's ipykernel overlay when no
    other kernel found uses it.

    What is removed is recomputed, never read from kernel.json (a kernel.json in a prefix others may write
    could name any file as its log or overlay): the kernel directory NAME in a kernels directory, when it is
    the user's own; STATE/envrun/kernels/NAME.log; the overlay's directory in the build store's kernels/,
    when the user built it. Each is removed through descriptors, never crossing a link."""
    from envbuild.kernel.installed import installed_kernels, search_dirs
    from envbuild.shared.safefiles import open_dir

    environ = os.environ if environ is None else environ
    check_name(name)
    not_ours: list[str] = []  # kernels of this name the user may not remove, and why
    for kernels in search_dirs(prefixes):
        try:
            kernels_fd = open_dir(kernels)
        except OSError:
            continue
        try:
            found = _own_kernel_dir(kernels_fd, kernels, name)
            if isinstance(found, str):
                not_ours.append(found)
                continue
            if found is None:
                continue
            ours, entry = _own_entry(found, os.path.join(kernels, name))
            if not ours:
                os.close(found)
                not_ours.append(f"{os.path.join(kernels, name)} was not installed by envrun")
                continue
            directory = os.path.join(kernels, name)
            _remove_kernel_dir(kernels_fd, name, found)
        finally:
            os.close(kernels_fd)
        print(f"removed kernel {name}: {directory}", file=out)
        for other in not_ours:
            print(f"note: another kernel named {name} is not removed: {other}", file=out)
        _remove_log(name, environ, out)
        if entry is not None:
            _remove_ipykernel_overlay(entry, installed_kernels(prefixes), environ, out)
        return
    if not_ours:
        raise UsageError(f"no kernel named {name} of yours: " + "; ".join(not_ours),
                         "envrun removes only kernels you installed: remove another user's with its owner, and one "
                         f"Jupyter installed with its own command (jupyter kernelspec remove {name})")
    raise UsageError(f"no kernel named {name} in " + ", ".join(search_dirs(prefixes)),
                     "`envrun kernel list` shows envrun's kernels (add --prefix DIR for one installed with --prefix)")


def _own_entry(kernel_fd: int, directory: str) -> tuple[bool, KernelEntry | None]:
    """Whether the kernel.json in the held kernel directory (read without following a link) is envrun's, and
    its entry (None when its metadata is damaged: the directory and log are still envrun's to remove)."""
    from envbuild.kernel.kernelspec import is_envrun_kernel
    from envbuild.shared.safefiles import read_file_nofollow

    try:
        kernel_json = json.loads(read_file_nofollow(kernel_fd, KERNEL_FILE, limit=1 << 20)[0])
    except (OSError, ValueError, EnvbuildError):
        return False, None
    if not isinstance(kernel_json, dict) or not is_envrun_kernel(kernel_json):
        return False, None
    try:
        return True, read_entry(kernel_json, os.path.join(directory, KERNEL_FILE))
    except EnvbuildError:
        return True, None


def _remove_log(name: str, environ: Mapping[str, str], out: TextIO) -> None:
    """STATE/envrun/kernels/NAME.log and its previous part, recomputed from the name."""
    from envbuild.kernel.kernelspec import LOG_DIR, log_name, state_home
    from envbuild.shared.safefiles import open_below, unlink_at

    state = state_home(environ)
    try:
        fd = open_below(state, LOG_DIR)
    except FileNotFoundError:
        return
    try:
        for file_name in (log_name(name), log_name(name) + ".1"):
            try:
                unlink_at(fd, file_name, missing_ok=False)
            except FileNotFoundError:
                continue
            print(f"removed its log {os.path.join(state, *LOG_DIR, file_name)}", file=out)
    finally:
        os.close(fd)


def _remove_ipykernel_overlay(entry: KernelEntry, kernels: Sequence[InstalledKernel], environ: Mapping[str, str],
                              out: TextIO) -> None:
    """The image's ipykernel overlay directory in the build store's kernels/, recomputed from the image: removed
    when the kernel named that very overlay, no other kernel found uses it and the user built it."""
    from envbuild.host.runtime import cache_dir_path
    from envbuild.shared.safefiles import open_below, remove_tree_at, subdir

    overlay = entry.ipykernel_overlay
    if not overlay:
        return
    others = [k for k in kernels if k.entry is not None and k.entry.ipykernel_overlay == overlay]
    if others:
        print(f"kept the ipykernel overlay {overlay}: used by " + ", ".join(k.name for k in others), file=out)
        return
    store_root = cache_dir_path(dict(environ))
    home = overlay_dir(store_root, entry.image)
    if overlay != os.path.join(home, "ipykernel.sqsh"):
        print(f"kept the ipykernel overlay {overlay}: not the one envrun builds for {entry.image} in the build store "
              f"{store_root} (`envbuild cache` manages the store)", file=out)
        return
    try:
        kernels_fd = open_below(store_root, ("kernels",))
    except (OSError, EnvbuildError):
        return
    try:
        try:
            home_fd = subdir(kernels_fd, os.path.basename(home), where=home)
        except (OSError, EnvbuildError) as exc:
            print(f"kept the ipykernel overlay {home}: {getattr(exc, 'message', None) or exc}", file=out)
            return
        owner = os.fstat(home_fd).st_uid
        os.close(home_fd)
        if owner != os.geteuid():
            print(f"kept the ipykernel overlay {home}: {_user_name(owner)} built it", file=out)
            return
        remove_tree_at(kernels_fd, os.path.basename(home))
    finally:
        os.close(kernels_fd)
    print(f"removed the ipykernel overlay {home} (no other kernel uses it; the build store keeps its copy: "
          "`envbuild cache` manages that)", file=out)


# -- the kernel process ---------------------------------------------------------------------------------------------


def run_kernel(kernel_file: str, connection_file: str, environ: Mapping[str, str], cwd: str) -> None:
    """What a kernelspec of envrun's runs: the kernel inside the image (this process becomes it), its stderr
    appended to the kernel's log. When it cannot start, a stand-in kernel (envbuild.kernel.errorkernel) shows
    the reason in the notebook."""
    entry: KernelEntry | None = None
    try:
        try:
            with open(kernel_file, encoding="utf-8") as handle:
                kernel_json = json.load(handle)
        except (OSError, ValueError) as exc:
            raise UsageError(f"cannot read the kernelspec {kernel_file}: {exc}",
                             "install the kernel again: envrun kernel install --force ...") from None
        entry = read_entry(kernel_json if isinstance(kernel_json, dict) else {}, kernel_file)
        _log_to(entry.log, entry.name, f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} envrun kernel {entry.name} starting "
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


def _log_to(path: str, name: str, header: str) -> None:
    """Append this process's stderr (and the kernel's, after exec) to `path`; the previous log is kept as
    PATH.1 once it passes a few MB. Only a log of the shape envrun gives it (STATE/envrun/kernels/NAME.log,
    envbuild.kernel.kernelspec.log_place), opened below STATE without following a link; left as it is when the log
    cannot be written."""
    from envbuild.kernel.kernelspec import LOG_DIR, log_name, log_place
    from envbuild.shared.safefiles import open_append_at, open_below, rename_at

    state = log_place(path, name)
    if state is None:
        sys.stderr.write(f"envrun: the kernel log {path} is not where envrun puts kernel logs "
                         f"(STATE/envrun/kernels/{name}.log): not written\n")
        return
    try:
        log_dir = open_below(state, LOG_DIR, create=True)
        try:
            file_name = log_name(name)
            try:
                if os.stat(file_name, dir_fd=log_dir, follow_symlinks=False).st_size > _LOG_KEEP_BYTES:
                    rename_at(log_dir, file_name, log_dir, file_name + ".1")
            except FileNotFoundError:
                pass
            descriptor = open_append_at(log_dir, file_name)
        finally:
            os.close(log_dir)
    except (OSError, EnvbuildError) as exc:
        sys.stderr.write(f"envrun: cannot write the kernel log {path}: {getattr(exc, 'strerror', None) or exc}\n")
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
