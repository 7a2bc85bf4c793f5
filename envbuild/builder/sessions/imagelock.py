"""The resolution of an image spec's lock (`envbuild lock SPEC`, and a build whose lock is stale): get the
base into the store, ask its Python for the target (version, platform), resolve with uv on the host for
that target. SPEC.lock itself is read and written by envbuild.builder.sessions.lockdecision."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from envbuild.shared import safefiles
from envbuild.shared.errors import EnvbuildError, ToolError

if TYPE_CHECKING:
    from envbuild.builder.plan.overlayprobe import BaseProbe
    from envbuild.builder.plan.plandata import BuildRequest
    from envbuild.envspec.loadspec import LoadedSpec
    from envbuild.lock.lockmodel import Lock, LockedPackage, LockTarget

# uv's variables naming package sources: a lock resolves from the host's pip configuration only, as builds install.
UV_SOURCE_VARIABLES = frozenset({"UV_INDEX_URL", "UV_EXTRA_INDEX_URL", "UV_DEFAULT_INDEX", "UV_INDEX", "UV_FIND_LINKS",
                                 "UV_NO_INDEX", "UV_INDEX_STRATEGY"})

# Printed by the base image's Python: version, machine, C library (glibc version or "" elsewhere).
_PROBE = ("import os, platform; lib = os.confstr('CS_GNU_LIBC_VERSION') or ''; "
          "print(platform.python_version(), platform.machine(), lib.split()[-1] if lib.startswith('glibc') else '-')")


# What the cached answer may hold: a Python version as platform.python_version() prints it, and a platform
# as envbuild.lock.uv.uv_python_platform makes one (e.g. x86_64-manylinux_2_36).
_VERSION = re.compile(r"[0-9]+\.[0-9]+\.[0-9]+[a-z0-9+]*")
_PLATFORM = re.compile(r"[a-z0-9_]+-[a-z0-9_]+")


def target_cache_file(store_root: Path, base_entry: str) -> str | None:
    """Where the base's answer is kept: its store entry, unless others can write it. The answer decides what
    the lock resolves for, and asking again costs one container start, so a store others can
    write keeps none of it: it is a cache, and such a store's copy is not read (docs/concepts/trust.md)."""
    from envbuild.store.integrity import others_can_write

    name = "python-target.json"
    return None if others_can_write(store_root, base_entry, (name,)) else f"{base_entry}/{name}"


def probe_target(request: BuildRequest, rootfs: str, *, cache_file: str | None = None) -> LockTarget:
    """The Python the build will install into: the venv's of an envbuild base, else the spec's interpreter.
    `cache_file` (in the base's store entry) keeps the answer for that Python and base digest: asking
    starts a container (on the path of every build whose lock is stale). It is read only as
    plain data of the shape written here; anything else is asked again."""
    from envbuild.envspec.specmodel import VENV_PREFIX

    python = f"{VENV_PREFIX}/bin/python" if os.path.exists(f"{rootfs}{VENV_PREFIX}/bin/python") else request.spec.python.interpreter
    key = {"python": python, "base_digest": request.base.digest or ""}
    if cache_file and key["base_digest"]:
        cached = _cached_target(cache_file, key)
        if cached is not None:
            return cached
    target = _ask_base(request, rootfs, python)
    if cache_file and key["base_digest"]:
        with contextlib.suppress(OSError):
            # In the store, which others may write: never through a name they could have planted.
            safefiles.write_file(cache_file, json.dumps({**key, "version": target.python, "platform": target.platform}) + "\n")
    return target


def _cached_target(cache_file: str, key: dict[str, str]) -> LockTarget | None:
    """The kept answer for `key`; None when there is none, it is for another Python or base, or it is not
    what probe_target writes (a version and a platform in their own forms)."""
    from envbuild.lock.lockmodel import LockTarget

    try:
        with open(cache_file, encoding="utf-8") as handle:
            cached = json.loads(handle.read(4096))
    except (OSError, ValueError):
        return None  # none yet, or unreadable: ask the base again
    if not isinstance(cached, dict) or {name: cached.get(name) for name in key} != key:
        return None
    version, platform = cached.get("version"), cached.get("platform")
    if not (isinstance(version, str) and _VERSION.fullmatch(version)
            and isinstance(platform, str) and _PLATFORM.fullmatch(platform)):
        return None
    return LockTarget(python=version, platform=platform)


def _ask_base(request: BuildRequest, rootfs: str, python: str) -> LockTarget:
    from envbuild.lock.lockmodel import LockTarget
    from envbuild.lock.uv import uv_python_platform

    runtime = request.facts.runtime
    argv = [runtime.path, "exec", "--cleanenv", "--no-mount", "home,cwd", "--pwd", "/", rootfs, python, "-I", "-c", _PROBE]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    fields = result.stdout.split()
    if result.returncode != 0 or len(fields) != 3:
        raise ToolError(
            f"cannot ask the base image's Python ({python}) for its version: {(result.stderr or result.stdout).strip()[-800:]}",
            "set python.interpreter in the spec to the base image's Python (e.g. /usr/bin/python3.11)",
        )
    version, machine, glibc = fields
    if glibc == "-":
        raise EnvbuildError(f"the base image's C library is not glibc ({machine}); envbuild locks manylinux wheels only",
                            "use a glibc-based base image (Debian, Ubuntu, RHEL-like)")
    return LockTarget(python=version, platform=uv_python_platform(machine, glibc))


def resolve_lock(loaded: LoadedSpec, previous: Lock | None, *, upgrade: bool, upgrade_packages: tuple[str, ...],
                 cache_dir: Path | None, verbose: bool, out: TextIO, log_path: Path | None = None,
                 quiet: bool = False) -> Lock:
    """The spec's lock, resolved now (keeping `previous`'s pins unless upgrading); nothing is written."""
    from envbuild.builder.execute.executor import BuildExecutor
    from envbuild.builder.plan.imageplan import plan_base
    from envbuild.builder.sessions.buildrequest import BuildOptions, make_request, read_digest
    from envbuild.builder.sessions.lockdecision import torch_index_for
    from envbuild.host.arch import host_arch
    from envbuild.host.buildhost import gather_host_facts
    from envbuild.inventory.installedtorch import check_locked_family
    from envbuild.lock.lockmodel import Lock, lock_inputs
    from envbuild.store.entries import touch_used

    spec = loaded.spec
    # A lock for another architecture runs nothing: it needs uv, not the container runtime.
    facts = gather_host_facts(need_runtime=_other_arch(loaded, host_arch()) is None, cache_dir=cache_dir)
    if facts.uv is None:
        raise EnvbuildError("envbuild lock needs uv, which is not installed", "pip install uv (into envbuild's environment)")
    if not spec.python.requirements():
        raise EnvbuildError(f"{loaded.path}: the spec installs no Python packages; there is nothing to lock")

    other_arch = _other_arch(loaded, facts.machine)
    request = make_request(loaded, BuildOptions(output=Path(f"/nonexistent/{spec.name}.sif")), facts, lock=None,
                           other_arch_ok=other_arch is not None)
    if other_arch is not None:
        return _resolve_for_other_arch(loaded, request, other_arch, previous, upgrade=upgrade,
                                       upgrade_packages=upgrade_packages, quiet=quiet, out=out)
    base = plan_base(request)
    log_path = log_path or Path(facts.cache_dir) / "logs" / f"lock-{spec.name}.log"
    if not quiet:
        print(f"locking {spec.name}: getting the base {spec.base.describe()}", file=out, flush=True)
    store_root = Path(facts.cache_dir)
    made_now = not os.path.exists(f"{base.entry}/complete")
    BuildExecutor(log_path, store_root=store_root, verbose=verbose, quiet=quiet, out=out).execute_base(base)
    touch_used(Path(base.entry))
    from envbuild.builder.sessions.storetrust import base_digest_source, trusted_base_digest

    # The lock records the base's digest: recomputed, not read, where others can write the store (as a build does).
    request = request.with_base_digest(trusted_base_digest(store_root, base.entry, base.rootfs, base_digest_source(base),
                                                           read_digest(base), made_now=made_now))
    if spec.python.target != "envbuild-venv":
        return _resolve_in_base(loaded, request, base.rootfs, previous, upgrade=upgrade,
                                upgrade_packages=upgrade_packages, verbose=verbose, quiet=quiet, out=out,
                                log_path=log_path)
    target = probe_target(request, base.rootfs, cache_file=target_cache_file(store_root, base.entry))
    if not quiet:
        print(f"resolving for Python {target.python} on {target.platform}", file=out, flush=True)
    packages = _resolve(request, target, previous, upgrade=upgrade, upgrade_packages=upgrade_packages)
    # Before the lock is written: a lock whose torchvision is for another variant than torch builds an
    # image whose torchvision fails to load.
    check_locked_family(packages, f"the resolution of {loaded.path}", then=f"run `envbuild lock {loaded.path}` again")
    inputs = lock_inputs(spec, torch_index_for(loaded))
    return Lock(inputs=inputs, target=target, base_digest=request.base.digest, recipe_digest=request.recipe_digest,
                resolver=f"uv {facts.uv_version}", packages=packages, spec_name=spec.name)


def _resolve_in_base(loaded: LoadedSpec, request: BuildRequest, rootfs: str, previous: Lock | None, *, upgrade: bool,
                     upgrade_packages: tuple[str, ...], verbose: bool, quiet: bool, out: TextIO, log_path: Path) -> Lock:
    """The lock of a spec whose packages go into the base's Python or a venv over it (python.target): resolved
    by pip inside the base against what the base already holds, as an overlay's lock is
    (envbuild.builder.sessions.overlaylock): the lock pins what the build adds, and keeps the base's torch family
    (recorded as kept) unless a requirement asks for another."""
    from envbuild.builder.execute.executor import BuildExecutor
    from envbuild.builder.plan.actions import MakeDirs, Remove, Step
    from envbuild.builder.plan.overlayplan import base_family, plan_resolve_in_base, split_requirements
    from envbuild.builder.plan.overlayprobe import PROBE_PYTHON, TARGET_PROBE_SHELL, parse_probe
    from envbuild.builder.plan.sandbox import HOST_MOUNT, Bind, sandbox_exec
    from envbuild.builder.sessions.overlaylock import _kept_pins, parse_pip_report
    from envbuild.envspec.specmodel import VENV_PREFIX
    from envbuild.inventory.installedtorch import check_locked_family
    from envbuild.lock.lockmodel import Lock, LockTarget, lock_inputs
    from envbuild.lock.uv import uv_python_platform
    from envbuild.store.layout import StorePaths

    spec, facts = loaded.spec, request.facts
    target = spec.python.target
    executor = BuildExecutor(log_path, store_root=Path(facts.cache_dir), verbose=verbose, quiet=quiet, out=out)
    work = StorePaths(str(facts.cache_dir)).work(f"lock-probe-{spec.name}-{request.options.build_id}")
    why = f"python.target: {target}: {spec.python.interpreter} first on the base's PATH"
    probe_step = Step("base-python", "find the base's Python and what it has installed", (
        Remove((work,)), MakeDirs((work,)),
        sandbox_exec(request, rootfs, ["/bin/sh", "-c", TARGET_PROBE_SHELL, "envbuild-probe", spec.python.interpreter,
                                       f"{HOST_MOUNT}/probe.json", PROBE_PYTHON, why],
                     writable=False, binds=[Bind(work, HOST_MOUNT, read_only=False)])),
        cleanup=(Remove((work,)),))
    try:
        executor.execute_steps((probe_step,), None, "lock")
        probe = parse_probe(Path(f"{work}/probe.json").read_text(encoding="utf-8"), f"{work}/probe.json")
    finally:
        safefiles.remove_tree(work)
    if not probe.glibc:
        raise EnvbuildError(f"the base's C library is not glibc ({probe.machine}); envbuild locks manylinux wheels only",
                            "build without a lock")
    pins = _kept_pins(previous, upgrade=upgrade, upgrade_packages=upgrade_packages)
    report = Path(facts.cache_dir) / "logs" / f"lock-{spec.name}-report.json"
    work, steps = plan_resolve_in_base(request, probe, pins, str(report), image=rootfs,
                                       venv_mount=VENV_PREFIX if target == "venv-over-base" else None,
                                       allow_torch_change=_asks_for_another_torch(spec.python.requirements(), probe))
    if not quiet:
        print(f"resolving with pip in the base's Python {probe.python} ({probe.version}), against the "
              f"{len(probe.packages)} distributions it holds", file=out, flush=True)
    executor.execute_steps(steps, work, "lock")
    packages = parse_pip_report(report.read_text(encoding="utf-8"), str(report))
    family = base_family(probe)
    check_locked_family(packages, f"the resolution of {loaded.path} in the base", then=f"run `envbuild lock {loaded.path}` again",
                        given=family)
    added = {package.name for package in packages}
    kept = [f"{name}=={version}" for name, version in family if _canonical(name) not in added]
    kept += [pin for pin in split_requirements(spec.python.requirements(), probe).kept if pin not in kept]
    from envbuild.builder.sessions.lockdecision import torch_index_for

    return Lock(inputs=lock_inputs(spec, torch_index_for(loaded)), target=LockTarget(python=probe.version,
                                                                 platform=uv_python_platform(probe.machine, probe.glibc)),
                base_digest=request.base.digest, recipe_digest=request.recipe_digest,
                resolver=f"pip {facts.pip_version} in the base", packages=packages, spec_name=spec.name, kept=tuple(kept))


def _asks_for_another_torch(requirements: list[str], probe: BaseProbe) -> bool:
    """Whether a requirement names a member of the torch family at a version the base does not have: the spec
    asks for another torch, so the base's family is no constraint (else it is kept, whatever else is added)."""
    from packaging.requirements import Requirement

    from envbuild.envspec.torchfamily import TORCH_FAMILY

    installed = probe.installed()
    for text in requirements:
        requirement = Requirement(text)
        name = _canonical(requirement.name)
        have = installed.get(name)
        if name in TORCH_FAMILY and have and not requirement.specifier.contains(have[1], prereleases=True):
            return True
    return False


def _canonical(name: str) -> str:
    from packaging.utils import canonicalize_name

    return canonicalize_name(name)


def _other_arch(loaded: LoadedSpec, host: str) -> str | None:
    """The system's architecture when it is not this machine's (the base cannot run here); else None."""
    from envbuild.host.arch import system_arch
    from envbuild.recipes.loadrecipe import load_recipe

    target = system_arch(load_recipe(loaded.recipe_ref), host)
    return target if host and target != host else None


def declared_target(loaded: LoadedSpec, arch: str, host: str) -> LockTarget:
    """The lock target for another architecture, from the spec's python.lock_target (the base is not run)."""
    from envbuild.lock.lockmodel import LockTarget
    from envbuild.lock.uv import uv_python_platform

    facts = loaded.spec.python.lock_target
    if facts is None:
        raise EnvbuildError(
            f"{loaded.path}: system {loaded.spec.system} runs {arch} and this machine is {host}, so the base cannot be run "
            "here to learn its Python and C library versions, which the resolution needs",
            f"add them to the spec: `python: {{lock_target: {{python: '3.12', glibc: '2.39'}}}}` with the base's "
            f"`python3 --version` and `ldd --version` (read on {loaded.spec.system} or from the base's documentation), "
            f"or lock on an {arch} machine")
    return LockTarget(python=facts.python, platform=uv_python_platform(arch, facts.glibc))


def _resolve_for_other_arch(loaded: LoadedSpec, request: BuildRequest, arch: str, previous: Lock | None, *,
                            upgrade: bool, upgrade_packages: tuple[str, ...], quiet: bool, out: TextIO) -> Lock:
    """A lock for a system of another architecture: uv resolves for its platform (--python-platform) on this
    machine, from the spec's lock_target; nothing is fetched or run, so the lock records no base digest."""
    from envbuild.builder.sessions.lockdecision import torch_index_for
    from envbuild.inventory.installedtorch import check_locked_family
    from envbuild.lock.lockmodel import Lock, lock_inputs

    spec, facts = loaded.spec, request.facts
    target = declared_target(loaded, arch, facts.machine)
    if not quiet:
        print(f"locking {spec.name} for {spec.system} ({arch}) on this {facts.machine} machine: the base is not "
              f"fetched; resolving for Python {target.python} on {target.platform} (python.lock_target)",
              file=out, flush=True)
    packages = _resolve(request, target, previous, upgrade=upgrade, upgrade_packages=upgrade_packages)
    check_locked_family(packages, f"the resolution of {loaded.path}", then=f"run `envbuild lock {loaded.path}` again")
    return Lock(inputs=lock_inputs(spec, torch_index_for(loaded)), target=target, base_digest=None,
                recipe_digest=request.recipe_digest, resolver=f"uv {facts.uv_version}", packages=packages,
                spec_name=spec.name)


def _resolve(request: BuildRequest, target: LockTarget, previous: Lock | None, *, upgrade: bool,
             upgrade_packages: tuple[str, ...]) -> tuple[LockedPackage, ...]:
    from envbuild.builder.plan.install import host_index_args, host_index_env
    from envbuild.host.secrets import redact
    from envbuild.lock.lockmodel import requirements_with_hashes
    from envbuild.lock.uv import parse_uv_requirements, uv_compile_argv
    from envbuild.store.layout import StorePaths

    facts = request.facts
    with tempfile.TemporaryDirectory(prefix="envbuild-lock-") as tmp:
        inputs_file, output_file = f"{tmp}/requirements.in", f"{tmp}/requirements.txt"
        safefiles.write_file(inputs_file, "".join(r + "\n" for r in request.spec.python.requirements()))
        if previous is not None:
            # uv keeps the versions found in an existing output file (unless told to upgrade them).
            safefiles.write_file(output_file, requirements_with_hashes(previous))
        argv = uv_compile_argv(facts.uv or "uv", inputs_file, output_file, target, index_args=host_index_args(request),
                               cache_dir=StorePaths(str(facts.cache_dir)).download_cache("uv"),
                               upgrade=upgrade, upgrade_packages=upgrade_packages)
        # The build's sources and nothing else: uv's own source variables (--no-config leaves them) are
        # dropped; sources with credentials come as variables, not flags anyone could read with ps.
        env = {key: value for key, value in os.environ.items() if key not in UV_SOURCE_VARIABLES}
        env.update(host_index_env(request))
        if facts.pip.cert:
            env["SSL_CERT_FILE"] = facts.pip.cert
        result = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=3600)
        if result.returncode != 0:
            raise ToolError(f"uv could not resolve the requirements of {request.spec.name}:\n"
                            f"{redact(result.stderr.strip()[-3000:])}",
                            "check the package names and versions in the spec, and that the package sources "
                            "(pip.conf index-url / find-links) have them")
        return parse_uv_requirements(Path(output_file).read_text(encoding="utf-8"))
