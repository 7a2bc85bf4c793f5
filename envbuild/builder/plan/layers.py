"""Content keys of the three layers an image is made of, and where each lives in the store.

- base:  the root filesystem (debootstrap / docker:// / oras:// / local image), keyed by its reference
         and options; its content digest is recorded next to it.
- env:   the base plus the Python environment, keyed by the base's digest and everything that decides
         what gets installed (the lock or the requirement list, package sources, installer version).
- image: the finished SIF, keyed by the env key plus the user layer (spec text with env, files, post,
         tests, labels; the lock; file contents; compression; envbuild version).

Keys are pure functions of the build request: the same inputs give the same key on any machine, so an
unchanged spec finds its image, and a spec that only adds a package finds its base and a parent env.
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any

from envbuild.envspec.specmodel import VENV_PREFIX
from envbuild.host.secrets import redact

if TYPE_CHECKING:
    from envbuild.builder.plan.plandata import BuildRequest, Layers
    from envbuild.envspec.specmodel import BaseImage, Spec
    from envbuild.host.buildhost import HostFacts
    from envbuild.host.pip import PipSettings

# Bump when what a layer contains changes for the same inputs, so older store entries are not reused.
ENV_LAYOUT_VERSION = 1
IMAGE_LAYOUT_VERSION = 1


def _hash(identity: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(identity, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def entry_name(readable: str, key: str) -> str:
    return f"{readable}-{key[:16]}"


def installer_identity(request: BuildRequest, installer: str) -> str:
    facts = request.facts
    if installer == "uv":
        return f"uv {facts.uv_version or 'unknown'}"
    return "pip (the base image's)"


def env_compat_identity(request: BuildRequest, installer: str, base_entry: str) -> dict[str, Any]:
    """Everything that shapes the Python layer except the package set: an env layer may start from
    another one (install only the difference) only when these agree."""
    pip = request.facts.pip
    return {
        "layout": ENV_LAYOUT_VERSION,
        "base": base_entry,
        "base_digest": request.base.digest,
        "installer": installer_identity(request, installer),
        "interpreter": request.spec.python.interpreter,
        "venv": VENV_PREFIX,
        # Where the packages go; absent for envbuild's own venv, so the layers of specs without it keep their keys.
        **({"target": request.spec.python.target} if request.spec.python.target != "envbuild-venv" else {}),
        "sources": sources_identity(pip),
        # SOURCE_DATE_EPOCH makes Python write hash-based .pyc files: different bytes in the layer.
        "reproducible": request.options.source_date_epoch is not None,
        "torch_index": redact(request.spec.python.pytorch_index_url(request.recipe) or "") or None,
    }


def sources_identity(pip: PipSettings) -> dict[str, Any]:
    """The host's package sources as part of a layer key, credentials redacted: a key holds no secret
    (even hashed), and a rotated token reuses the layers the old one built."""
    return {
        "index_url": redact(pip.index_url) if pip.index_url else None,
        "extra_index_urls": [redact(url) for url in pip.extra_index_urls],
        "find_links": [redact(link) for link in pip.find_links], "no_index": pip.no_index,
    }


def env_compat_key(request: BuildRequest, installer: str, base_entry: str) -> str:
    return _hash(env_compat_identity(request, installer, base_entry))


def env_key(request: BuildRequest, installer: str, base_entry: str) -> str:
    identity = env_compat_identity(request, installer, base_entry)
    if request.lock.requirements is not None:
        identity["locked"] = request.lock.requirements
    else:
        identity["requirements"] = list(request.spec.python.requirements())
    return _hash(identity)


def env_readable(request: BuildRequest) -> str:
    return request.spec.name[:40]


def image_key(request: BuildRequest, env: str) -> str:
    return _hash({
        "layout": IMAGE_LAYOUT_VERSION,
        "env": env,
        "envbuild": request.facts.envbuild_version,
        "spec": request.source.text,
        "lock": request.lock.text,
        "files": [list(pair) for pair in request.source.file_digests],
        "recipe": request.recipe_digest,
        "compression": request.options.compression,
        "source_date_epoch": request.options.source_date_epoch,
        # A layered image (SIF overlay partition) runs on fewer runtimes: never reused for a plain build.
        **({"form": "layered"} if request.options.layered else {}),
    })


# Seeded into every venv by `python -m venv`; never in a lock, so they do not count against a parent.
VENV_SEED = frozenset({"pip", "setuptools", "wheel"})


def _pins(lines: list[str]) -> set[tuple[str, str]]:
    from envbuild.inventory.pkgmeta import parse_pin

    return {pin for pin in map(parse_pin, lines) if pin}


def choose_env_parent(candidates: list[tuple[str, dict[str, Any], list[str], float]], *, compat: str,
                      requirements: list[str], locked: str | None) -> str | None:
    """Pick the env layer to install the difference on top of, from (name, meta, freeze, last used).

    It must agree on everything but the package set (`compat`) and hold nothing the new build does
    not want: unlocked, its requirements are a subset of the new ones; locked, every package it has
    is pinned at the same version by the lock. Among those, the one with the most packages (least
    left to install), then the most recently used."""
    wanted_pins = _pins(locked.splitlines()) if locked is not None else set()
    best: tuple[int, float, str] | None = None
    for name, meta, freeze, last_used in candidates:
        if meta.get("kind") != "env" or meta.get("compat") != compat:
            continue
        have = {pin for pin in _pins(freeze) if pin[0] not in VENV_SEED}
        if locked is not None:
            if not have <= wanted_pins:
                continue
        elif not set(meta.get("requirements") or []) <= set(requirements):
            continue
        score = (len(have), last_used, name)
        if best is None or score > best:
            best = score
    return best[2] if best else None


# --- the layers of one build (what the store is looked up by) ---------------------------------------

# Bump when the layout of cached bases changes, so old cache entries are not reused.
BASE_LAYOUT_VERSION = 2


def base_cache_key(base: BaseImage, facts: HostFacts, fingerprint: str = "") -> str:
    """Cache entry name for a base root filesystem: readable prefix + hash of everything that shapes it."""
    identity = {
        "layout": BASE_LAYOUT_VERSION, "kind": base.kind, "ref": base.ref,
        "include": sorted(set(base.include)), "mirror": base.mirror or facts.debian_mirror or "",
        "fingerprint": fingerprint,
    }
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]
    # Last path component keeps the name readable: debootstrap-bookworm-..., docker-python_3.12-slim-...
    readable = base.ref.split("://", 1)[-1].rstrip("/").rsplit("/", 1)[-1].replace(":", "_")[:48]
    return f"{base.kind}-{readable}-{digest}"


def choose_installer(spec: Spec, facts: HostFacts) -> str:
    if spec.python.installer == "auto":
        # uv does not count the base's packages as installed (see envbuild.builder.plan.overlayplan): pip, in the
        # base's Python or over it, keeps them.
        return "uv" if facts.uv and spec.python.target == "envbuild-venv" else "pip"
    return spec.python.installer


def plan_layers(request: BuildRequest) -> Layers:
    """The store entries of the build's layers (base, env, image), from their keys. Here rather than in
    envbuild.builder.plan.imageplan: a no-op build needs only these (and so imports no planner, whose import it would feel)."""
    from envbuild.builder.plan.plandata import Layers as LayersOfBuild

    spec, facts = request.spec, request.facts
    installer = choose_installer(spec, facts)
    base_entry = base_cache_key(spec.base, facts, request.base.fingerprint)
    env = env_key(request, installer, base_entry)
    image = image_key(request, env)
    return LayersOfBuild(
        base_entry=base_entry, env_entry=entry_name(env_readable(request), env), env_key=env,
        env_compat=env_compat_key(request, installer, base_entry),
        env_parent=request.env_parent, image_entry=entry_name(spec.name[:40], image), image_key=image,
    )
