"""What the planners need to know about the build host, gathered once, so planning itself is pure."""

from __future__ import annotations

import os
import re
import shutil
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from envbuild.host.arch import host_arch
from envbuild.host.node import usable_cpus
from envbuild.host.pip import PipSettings, read_host_pip_settings
from envbuild.host.runtime import Runtime, default_cache_dir, ensure_store_root, find_runtime, require_runtime


@dataclass(frozen=True)
class HostFacts:
    runtime: Runtime
    pip: PipSettings
    uv: str | None  # path of a uv binary to use inside the build sandbox
    debian_mirror: str | None  # None: debootstrap's own default
    cache_dir: Path
    envbuild_version: str
    proxy_env: tuple[tuple[str, str], ...] = ()  # http(s)_proxy etc., passed into builds (which run with --cleanenv)
    as_root: bool = True
    # For the provenance record and the layer keys (an installer upgrade gives a new env layer).
    uv_version: str | None = None
    runtime_version: str = ""
    host_info: tuple[tuple[str, str], ...] = ()
    python: str = ""  # the interpreter running envbuild (runs envbuild's own helpers during a build)
    cpus: int | None = None  # CPUs this process may use (mksquashfs -processors); None: ask at build time
    # envbuild's own pip package directory and version: overlays install with it (bound into the base).
    pip_module: str | None = None
    pip_version: str | None = None
    machine: str = ""  # this machine's architecture (envbuild.host.arch); "" unknown: not compared


def find_uv() -> str | None:
    """uv next to the running Python (installed with envbuild), else on PATH."""
    beside = Path(sys.executable).with_name("uv")
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("uv")


def host_debian_mirror(
    sources_dir: Path = Path("/etc/apt/sources.list.d"), sources_list: Path = Path("/etc/apt/sources.list")
) -> str | None:
    """The Debian archive the host's apt uses (not the security archive), or None."""
    for path in sorted(sources_dir.glob("*.sources")):
        try:
            text = path.read_text(encoding="utf-8")
        except OSError:
            continue
        for stanza in re.split(r"\n\s*\n", text):
            fields: dict[str, str] = dict(
                (m.group(1).lower(), m.group(2).strip())
                for m in re.finditer(r"^([A-Za-z-]+):[ \t]*(.*)$", stanza, re.M)
            )
            uris, suites = fields.get("uris", "").split(), fields.get("suites", "").split()
            if fields.get("enabled", "yes").lower() == "no" or "deb" not in fields.get("types", "").split():
                continue
            if uris and suites and not any(s.endswith("-security") for s in suites):
                return uris[0]
    try:
        for line in sources_list.read_text(encoding="utf-8").splitlines():
            parts = line.split()
            if len(parts) >= 3 and parts[0] == "deb" and not parts[2].endswith("-security"):
                return next(p for p in parts[1:] if "://" in p)
    except (OSError, StopIteration):
        pass
    return None


PROXY_VARIABLES = ("http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY", "all_proxy")
# Certificate bundles that pip (through requests) honours when pip.conf names none.
CA_BUNDLE_VARIABLES = ("REQUESTS_CA_BUNDLE", "SSL_CERT_FILE", "CURL_CA_BUNDLE")


def tool_version(argv: list[str]) -> str:
    """First line of `tool --version`, e.g. "uv 0.13.9" / "apptainer version 1.4.5"; "" when it cannot run."""
    import subprocess

    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return (out.stdout or out.stderr).strip().splitlines()[0] if (out.stdout or out.stderr).strip() else ""


def _version_line(program: str) -> str:
    from envbuild.host.runtimeversion import cached_version_line

    return cached_version_line(program)


def build_host_info() -> tuple[tuple[str, str], ...]:
    import platform

    os_name = ""
    try:
        for line in Path("/etc/os-release").read_text(encoding="utf-8").splitlines():
            if line.startswith("PRETTY_NAME="):
                os_name = line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    uname = platform.uname()
    return (("hostname", uname.node), ("kernel", uname.release), ("machine", uname.machine), ("os", os_name),
            ("python", platform.python_version()))


def gather_host_facts(*, need_runtime: bool = True, cache_dir: Path | None = None) -> HostFacts:
    from envbuild import __version__

    # probe=False: the runtime's and uv's `--version` lines come from the cache that envrun keeps, keyed by the
    # program file (envbuild.host.runtimeversion): starting both cost every no-op build.
    runtime = require_runtime(probe=False) if need_runtime else (find_runtime() or Runtime("apptainer", "apptainer"))
    pip = read_host_pip_settings()
    if pip.cert is None:
        bundle = next((os.environ[v] for v in CA_BUNDLE_VARIABLES if os.path.isfile(os.environ.get(v, ""))), None)
        if bundle:
            pip = replace(pip, cert=bundle)
    uv = find_uv()
    store = (cache_dir or default_cache_dir()).absolute()
    if ":" in str(store) or "," in str(store):
        from envbuild.shared.errors import UsageError

        # Builds bind parts of the store into the sandbox, and apptainer's --bind SRC:DST[:OPTS],...
        # has no way to quote these characters.
        raise UsageError(f"the build store {store} has a ':' or ',' in its path, which apptainer --bind cannot express",
                         "choose another --cache-dir / ENVBUILD_CACHE_DIR")
    if need_runtime:  # a build or a lock, which write into the store (a dry run writes nothing)
        ensure_store_root(str(store))
    return HostFacts(
        runtime=runtime,
        pip=pip,
        uv=uv,
        debian_mirror=host_debian_mirror(),
        cache_dir=store,
        envbuild_version=__version__,
        proxy_env=tuple((k, os.environ[k]) for k in PROXY_VARIABLES if os.environ.get(k)),
        as_root=os.geteuid() == 0,
        uv_version=_version_line(uv).split(" (")[0].removeprefix("uv ") if uv else None,
        runtime_version=(runtime.version or tool_version([runtime.path, "--version"])) if need_runtime else "",
        host_info=build_host_info(),
        python=sys.executable,
        cpus=usable_cpus(),
        pip_module=own_pip()[0], pip_version=own_pip()[1], machine=host_arch(),
    )


def own_pip() -> tuple[str | None, str | None]:
    """The directory of the pip package in envbuild's own environment, and its version (not imported)."""
    import importlib.metadata
    import importlib.util

    spec = importlib.util.find_spec("pip")
    if spec is None or not spec.submodule_search_locations:
        return None, None
    try:
        version = importlib.metadata.version("pip")
    except importlib.metadata.PackageNotFoundError:
        version = None
    return next(iter(spec.submodule_search_locations)), version
