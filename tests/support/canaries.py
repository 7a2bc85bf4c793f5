"""Canary secrets for the leak tests: unique values put where a user's secrets live during a build (token
variables, a pip index URL with user:password in pip.conf and in PIP_EXTRA_INDEX_URL, uv's index variable,
a netrc), and a search for them in text and files."""

from __future__ import annotations

import secrets
from pathlib import Path

PREFIX = "cnry"  # every canary starts with it: one search per file finds whether any is there


def canary_environment(directory: Path, index: str) -> tuple[dict[str, str], dict[str, str]]:
    """(variables to add to a build's environment, every canary by its kind). `index`: host:port/path of a
    package index (http) the credentials are for; pip.conf and PIP_EXTRA_INDEX_URL point there."""
    tag = secrets.token_hex(6)

    def canary(kind: str) -> str:
        return f"{PREFIX}{kind}{tag}"

    values = {kind: canary(kind) for kind in (
        "hftok", "wandb", "ghtok", "svctok", "dbpw", "awssec", "confuser", "confpw", "envuser", "envpw", "uvuser",
        "uvpw", "netuser", "netpw", "aptenv", "singenv", "proxypw")}
    pip_conf = directory / "pip.conf"
    # As in a site's pip.conf; the host's own files still apply (PIP_CONFIG_FILE comes last and wins).
    pip_conf.write_text(f"[global]\nindex-url = http://{values['confuser']}:{values['confpw']}@{index}\n")
    netrc = directory / "netrc"
    netrc.write_text(f"machine {index.split(':')[0].split('/')[0]} login {values['netuser']} password {values['netpw']}\n")
    netrc.chmod(0o600)
    env = {
        "HF_TOKEN": f"hf_{values['hftok']}",
        "WANDB_API_KEY": values["wandb"],
        "GITHUB_TOKEN": f"ghp_{values['ghtok']}",
        "MY_SERVICE_TOKEN": values["svctok"],
        "DB_PASSWORD": values["dbpw"],
        "AWS_SECRET_ACCESS_KEY": values["awssec"],
        "PIP_CONFIG_FILE": str(pip_conf),
        "PIP_EXTRA_INDEX_URL": f"http://{values['envuser']}:{values['envpw']}@{index}",
        "UV_INDEX_URL": f"http://{values['uvuser']}:{values['uvpw']}@{index}",
        "NETRC": str(netrc),
        # What apptainer carries into every container, --cleanenv or not.
        "APPTAINERENV_HF_TOKEN": values["aptenv"],
        "SINGULARITYENV_WANDB_API_KEY": values["singenv"],
        # A proxy variable with credentials that points nowhere: only no_proxy hosts are reached.
        "ALL_PROXY": f"http://proxyuser:{values['proxypw']}@127.0.0.1:9",
        "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost",
    }
    return env, values


def found_in_text(text: str, canaries: list[str]) -> list[str]:
    return [c for c in canaries if c in text]


def found_in_tree(root: Path, canaries: list[str]) -> dict[str, list[str]]:
    """path -> canaries found in it, for every regular file under `root` (symlinks not followed)."""
    needles = [c.encode() for c in canaries]
    prefixes = {n[:len(PREFIX)] for n in needles}
    hits: dict[str, list[str]] = {}
    for path in [root] if root.is_file() else root.rglob("*"):
        if path.is_symlink() or not path.is_file():
            continue
        try:
            data = path.read_bytes()
        except OSError:
            continue
        if not any(p in data for p in prefixes):
            continue
        found = [n.decode() for n in needles if n in data]
        if found:
            hits[str(path)] = found
    return hits
