"""Venv overlays for envrun (issue 11): each NAME.sqsh's record, and the check that it was made for the
image it is about to run on. A venv made with another base's Python fails in confusing ways at import time
(a missing libpython, packages built for another ABI), so envrun refuses before launching, naming both.

Only imported when an overlay is given: envrun's plain path never pays for the squashfs reader or hashlib.
"""

from __future__ import annotations

import os

from envbuild.errors import UsageError
from envbuild.inventory.errors import ImageFormatError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any


class Overlay:
    __slots__ = ("path", "record")

    def __init__(self, path: str, record: dict[str, Any]) -> None:
        self.path = path  # absolute
        self.record = record  # envbuild.overlayformat's record

    @property
    def mount(self) -> str:
        return self.record["mount"]


def read_overlays(paths: Sequence[str]) -> list[Overlay]:
    """Each overlay file's record, bottom first; UsageError for a missing file or one envbuild did not make."""
    from envbuild.inventory.overlay import read_overlay_record

    overlays = []
    for path in paths:
        if not os.path.isfile(path):
            raise UsageError(f"overlay {path} does not exist",
                             "build it with `envbuild build SPEC` (a spec with an overlay: section), or fix the path")
        try:
            overlays.append(Overlay(path, read_overlay_record(path)))
        except ImageFormatError as exc:
            raise UsageError(f"overlay {exc.message}", exc.hint) from None
    return overlays


class ImageIdentity:
    """The image's SIF id (header only) and, when asked, its sha256 (cached per path, size and mtime)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.sif_id = _sif_id(path)
        self._digest: str | None = None

    @property
    def digest(self) -> str:
        if self._digest is None:
            self._digest = file_digest(self.path)
        return self._digest

    def describe(self) -> str:
        return f"{self.path} ({self.digest}, SIF id {self.sif_id or 'none: not a SIF'})"


def check_overlays(overlays: Sequence[Overlay], image: str, *, force: bool) -> tuple[list[str], list[str]]:
    """(warnings, notes). UsageError when an overlay was made for another base than `image`, or when that
    cannot be told (a sandbox directory), unless `force`: then a warning says so."""
    warnings: list[str] = []
    notes: list[str] = []
    identity = None if os.path.isdir(image) else ImageIdentity(image)
    for overlay in overlays:
        base = overlay.record.get("base") or {}
        built_for = _describe_base(overlay)
        if identity is None:
            problem = (f"image {image} is a sandbox directory, so envrun cannot tell whether overlay {overlay.path} "
                       f"was made for it; the overlay was built for {built_for}")
        elif base.get("sif_id") and base["sif_id"] == identity.sif_id:
            notes.append(f"overlay {overlay.path}: built for this image (same SIF id {identity.sif_id})")
            continue
        elif base.get("digest") == identity.digest:
            notes.append(f"overlay {overlay.path}: built for this image (same {identity.digest})")
            continue
        else:
            problem = f"overlay {overlay.path} was built for {built_for}; this image is {identity.describe()}"
        if force:
            warnings.append(f"{problem}; running it anyway (--force-overlay): its packages may not work with this "
                            "base's Python")
            continue
        raise UsageError(problem, _fix(overlay, image, base.get("path")))
    return warnings, notes


def _describe_base(overlay: Overlay) -> str:
    base, python = overlay.record.get("base") or {}, overlay.record.get("python") or {}
    where = base.get("path") or base.get("ref") or "an unknown base"
    return (f"{where} ({base.get('digest') or 'no digest'}, SIF id {base.get('sif_id') or 'none'}), "
            f"Python {python.get('version', '?')} {python.get('abi', '?')}")


def _fix(overlay: Overlay, image: str, built_for: str | None) -> str:
    spec = overlay.record.get("name") or "the overlay"
    other = f" (--image {built_for})" if built_for else ""
    return (f"rebuild the overlay for this base: `envbuild build SPEC` with `base: localimage:{image}` in {spec}'s spec; "
            f"or run it on the base it was built for{other}; or pass --force-overlay to run it anyway")


def _sif_id(path: str) -> str | None:
    """The SIF header's image id (128 bytes read), None for a file that is not a SIF."""
    from envbuild.inventory.sif import parse_header
    from envbuild.inventory.sifformat import HEADER

    try:
        with open(path, "rb") as handle:
            return parse_header(handle.read(HEADER.size), path).image_id
    except (OSError, ImageFormatError):
        return None


def file_digest(path: str) -> str:
    """"sha256:<hex>" of the file, computed once per (absolute path, size, mtime_ns): a multi-GiB base takes
    seconds to hash, and envrun runs before every job step."""
    import hashlib

    from envbuild.host.runtime import cache_dir_path

    status = os.stat(path)
    key = f"{os.path.abspath(path)}\0{status.st_size}\0{status.st_mtime_ns}"
    cache = os.path.join(cache_dir_path(), "envrun", "digests", hashlib.sha256(key.encode()).hexdigest()[:32])
    try:
        with open(cache, encoding="utf-8") as handle:
            cached = handle.read().strip()
        if cached.startswith("sha256:") and len(cached) == 71:
            return cached
    except OSError:
        pass
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(4 << 20), b""):
            digest.update(block)
    value = f"sha256:{digest.hexdigest()}"
    try:
        from envbuild.atomicfile import atomic_write

        os.makedirs(os.path.dirname(cache), exist_ok=True)
        atomic_write(cache, value + "\n")
    except OSError:
        pass  # an unwritable cache only costs the hashing again
    return value
