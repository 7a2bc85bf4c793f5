"""The resolution of an overlay spec's lock (`envbuild lock SPEC`, and a build whose lock is stale): pin,
with hashes, exactly what the overlay adds to its base.

uv resolves image locks on the host, but for an overlay the base's installed packages decide what is
added, and uv does not see a base venv's packages (see envbuild.builder.plan.overlayplan). So pip, inside the base
with a scratch overlay venv, says what it would install (`pip install --dry-run --report`, pip >= 22.2):
each package with its version and the archive's sha256. `envbuild build --locked` then installs exactly
those with `pip install --require-hashes --no-deps`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from envbuild.shared.errors import EnvbuildError

if TYPE_CHECKING:
    from envbuild.envspec.loadspec import LoadedSpec
    from envbuild.lock.lockmodel import Lock, LockedPackage


def resolve_overlay_lock(loaded: LoadedSpec, previous: Lock | None, *, upgrade: bool, upgrade_packages: tuple[str, ...],
                         cache_dir: Path | None, verbose: bool, out: TextIO, log_path: Path | None = None,
                         quiet: bool = False) -> Lock:
    """The overlay's lock, resolved now by pip in the base (keeping `previous`'s pins unless upgrading)."""
    from envbuild.builder.execute.executor import BuildExecutor
    from envbuild.builder.plan.overlayplan import base_family, plan_overlay_base, plan_overlay_resolve
    from envbuild.builder.sessions.buildrequest import BuildOptions
    from envbuild.builder.sessions.overlaysession import OverlaySession, _cached_probe, _read
    from envbuild.host.buildhost import gather_host_facts
    from envbuild.inventory.installedtorch import check_locked_family
    from envbuild.lock.lockmodel import Lock, LockTarget, lock_inputs
    from envbuild.lock.uv import uv_python_platform

    spec = loaded.spec
    if not spec.python.requirements():
        raise EnvbuildError(f"{loaded.path}: the overlay installs no Python packages; there is nothing to lock")
    facts = gather_host_facts(cache_dir=cache_dir)
    options = BuildOptions(output=Path(f"/nonexistent/{spec.name}.sqsh"), cache_dir=cache_dir)
    request = OverlaySession(loaded, options, out=out)._request(facts)
    base = plan_overlay_base(request)
    log_path = log_path or Path(facts.cache_dir) / "logs" / f"lock-{spec.name}.log"
    executor = BuildExecutor(log_path, store_root=Path(facts.cache_dir), verbose=verbose, quiet=quiet, out=out)
    if not quiet:
        print(f"locking overlay {spec.name} on {request.base.path}", file=out, flush=True)
    executor.execute_steps(base.steps, None, "base")
    probe = _cached_probe(base)
    assert probe is not None
    if not probe.glibc:
        raise EnvbuildError(f"the base's C library is not glibc ({probe.machine}); envbuild locks manylinux wheels only",
                            "build the overlay without a lock")
    request = request.with_base_digest(_read(base.digest_file))
    pins = _kept_pins(previous, upgrade=upgrade, upgrade_packages=upgrade_packages)
    report = Path(facts.cache_dir) / "logs" / f"lock-{spec.name}-report.json"
    work, steps = plan_overlay_resolve(request, probe, pins, str(report))
    if not quiet:
        print(f"resolving with pip {facts.pip_version} in the base's Python {probe.version}", file=out, flush=True)
    executor.execute_steps(steps, work, "lock")
    packages = parse_pip_report(report.read_text(encoding="utf-8"), str(report))
    # What the overlay adds against the base's torch, which the overlay's Python imports.
    check_locked_family(packages, f"the resolution of {loaded.path} on {request.base.path}",
                        then=f"run `envbuild lock {loaded.path}` again", given=base_family(probe))
    return Lock(inputs=lock_inputs(spec, None), target=LockTarget(python=probe.version,
                                                                 platform=uv_python_platform(probe.machine, probe.glibc)),
                base_digest=request.base.digest, recipe_digest=request.recipe_digest,
                resolver=f"pip {facts.pip_version} in the base", packages=packages, spec_name=spec.name)


def _kept_pins(previous: Lock | None, *, upgrade: bool, upgrade_packages: tuple[str, ...]) -> tuple[str, ...]:
    """The old lock's versions, kept unless upgrading (like uv keeps an existing output file's pins)."""
    if previous is None or upgrade:
        return ()
    from packaging.utils import canonicalize_name

    skip = {canonicalize_name(name) for name in upgrade_packages}
    return tuple(f"{p.name}=={p.version}" for p in previous.packages if p.name not in skip)


def parse_pip_report(text: str, where: str) -> tuple[LockedPackage, ...]:
    """The packages pip would install, from its installation report (format version 1)."""
    from envbuild.lock.lockmodel import LockedPackage

    try:
        report = json.loads(text)
        items = report["install"]
    except (ValueError, KeyError, TypeError) as exc:
        raise EnvbuildError(f"{where}: not a pip installation report ({exc})", "report a bug with this file") from None
    packages = []
    for item in items:
        metadata, archive = item.get("metadata", {}), item.get("download_info", {}).get("archive_info", {})
        hashes = [f"{name}:{value}" for name, value in sorted(archive.get("hashes", {}).items()) if name == "sha256"]
        if not hashes and "=" in archive.get("hash", ""):
            name, value = archive["hash"].split("=", 1)
            hashes = [f"{name}:{value}"]
        if not hashes:
            raise EnvbuildError(f"{where}: pip gives no sha256 for {metadata.get('name')} "
                                f"({item.get('download_info', {}).get('url', 'unknown source')})",
                                "a lock needs every archive's hash: use an index or find-links location pip can hash "
                                "(a directory or source checkout cannot be locked)")
        packages.append(LockedPackage(name=metadata["name"], version=metadata["version"], hashes=tuple(hashes)))
    return tuple(packages)
