"""What the planners need to know about the build host, gathered once, so planning itself is pure."""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass, replace
from pathlib import Path

from envbuild.hostpip import PipSettings, read_host_pip_settings
from envbuild.runtime import Runtime, default_cache_dir, find_runtime, require_runtime


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


def find_uv() -> str | None:
    """uv next to the running Python (installed with envbuild), else on PATH."""
    import sys

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
            fields = dict(
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


def gather_host_facts(*, need_runtime: bool = True) -> HostFacts:
    from envbuild import __version__

    runtime = require_runtime() if need_runtime else (find_runtime() or Runtime("apptainer", "apptainer"))
    pip = read_host_pip_settings()
    if pip.cert is None:
        bundle = next((os.environ[v] for v in CA_BUNDLE_VARIABLES if os.path.isfile(os.environ.get(v, ""))), None)
        if bundle:
            pip = replace(pip, cert=bundle)
    return HostFacts(
        runtime=runtime,
        pip=pip,
        uv=find_uv(),
        debian_mirror=host_debian_mirror(),
        cache_dir=default_cache_dir(),
        envbuild_version=__version__,
        proxy_env=tuple((k, os.environ[k]) for k in PROXY_VARIABLES if os.environ.get(k)),
        as_root=os.geteuid() == 0,
    )
