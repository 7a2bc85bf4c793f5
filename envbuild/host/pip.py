"""The host's pip configuration (index URLs, find-links, certificates), read the way pip reads it.

Builds install packages inside the image with the same sources the user's own `pip install` uses:
that is how a site's local wheel mirror or an air-gapped index keeps working inside the build.
"""

from __future__ import annotations

import configparser
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

_LIST_KEYS = {"extra-index-url", "find-links", "trusted-host"}
_KEYS = {"index-url", "cert", "client-cert", "no-index"} | _LIST_KEYS
_TRUE = {"1", "true", "yes", "on"}


@dataclass(frozen=True)
class PipSettings:
    """Where packages come from. Locations are URLs or local paths exactly as configured."""

    index_url: str | None = None
    extra_index_urls: tuple[str, ...] = ()
    find_links: tuple[str, ...] = ()
    trusted_hosts: tuple[str, ...] = ()
    cert: str | None = None
    client_cert: str | None = None
    no_index: bool = False
    sources: tuple[str, ...] = field(default=(), compare=False)  # files and variables read, for -v


def pip_config_files(environ: Mapping[str, str], home: Path, prefix: Path) -> list[Path]:
    """pip's configuration files in the order pip applies them (later wins)."""
    override = environ.get("PIP_CONFIG_FILE")
    if override == os.devnull:
        return []
    xdg_dirs = environ.get("XDG_CONFIG_DIRS", "/etc/xdg").split(":")
    files = [Path(d) / "pip" / "pip.conf" for d in xdg_dirs if d] + [Path("/etc/pip.conf")]
    config_home = Path(environ.get("XDG_CONFIG_HOME", str(home / ".config")))
    files += [home / ".pip" / "pip.conf", config_home / "pip" / "pip.conf"]
    files.append(prefix / "pip.conf")
    if override:
        files.append(Path(override))
    return files


def parse_pip_settings(texts: list[tuple[str, str]], environ: Mapping[str, str]) -> PipSettings:
    """Combine config file texts (name, text; in pip's order) and PIP_* variables, as pip does:
    [install] overrides [global], later files override earlier ones, variables override files."""
    values: dict[str, str] = {}
    sources: list[str] = []
    for name, text in texts:
        parser = configparser.RawConfigParser()
        try:
            parser.read_string(text, source=name)
        except configparser.Error:
            continue  # pip itself refuses such a file; the user sees pip's error, not ours
        touched = False
        for section in ("global", "install"):
            if parser.has_section(section):
                for key, value in parser.items(section):
                    key = key.replace("_", "-")
                    if key in _KEYS:
                        values[key] = value
                        touched = True
        if touched:
            sources.append(name)
    for key in _KEYS:
        var = "PIP_" + key.upper().replace("-", "_")
        if var in environ:
            values[key] = environ[var]
            sources.append(var)

    def listed(key: str) -> tuple[str, ...]:
        return tuple(values.get(key, "").split())

    return PipSettings(
        index_url=values.get("index-url") or None,
        extra_index_urls=listed("extra-index-url"),
        find_links=listed("find-links"),
        trusted_hosts=listed("trusted-host"),
        cert=values.get("cert") or None,
        client_cert=values.get("client-cert") or None,
        no_index=values.get("no-index", "").strip().lower() in _TRUE,
        sources=tuple(sources),
    )


def read_host_pip_settings(environ: Mapping[str, str] | None = None) -> PipSettings:
    environ = os.environ if environ is None else environ
    home = Path(environ.get("HOME", str(Path.home())))
    texts = []
    for path in pip_config_files(environ, home, Path(sys.prefix)):
        try:
            texts.append((str(path), path.read_text(encoding="utf-8")))
        except OSError:
            continue
    return parse_pip_settings(texts, environ)


def local_path_of(location: str) -> str | None:
    """The host path behind a find-links/index location, or None for a remote URL."""
    if location.startswith("file://"):
        return location[len("file://") :] or "/"
    if "://" in location:
        return None
    return location
