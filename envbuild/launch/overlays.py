"""Venv overlays for envrun: each NAME.sqsh's record, and the check that it was made for the
image it is about to run on. A venv made with another base's Python fails in confusing ways at import time
(a missing libpython, packages built for another ABI), so envrun refuses before launching, naming both.

Only imported when an overlay is given. Even then envrun runs before every job step, so what it learns
from a file is cached in the user's own cache (envbuild.host.usercache) per (absolute path, size, mtime):
the overlay's record (the squashfs reader's imports alone weigh on a launch) and the image's sha256 (seconds for a
multi-GiB base), each checked for its shape when read back. The image's SIF id is read from its 128-byte
header directly, without the full SIF reader.
"""

from __future__ import annotations

import os

from envbuild.host.usercache import cached_per_file
from envbuild.shared.errors import ImageFormatError, UsageError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any


class Overlay:
    __slots__ = ("path", "record")

    def __init__(self, path: str, record: dict[str, Any]) -> None:
        self.path = path  # absolute
        self.record = record  # envbuild.shared.overlayformat's record

    @property
    def mount(self) -> str:
        mount: str = self.record["mount"]  # overlayformat.check_record checked it is text
        return mount


def read_overlays(paths: Sequence[str]) -> list[Overlay]:
    """Each overlay file's record, bottom first; UsageError for a missing file or one envbuild did not make."""
    overlays = []
    for path in paths:
        if not os.path.isfile(path):
            raise UsageError(f"overlay {path} does not exist",
                             "build it with `envbuild build SPEC` (a spec with an overlay: section), or fix the path")
        try:
            overlays.append(Overlay(path, cached_per_file(path, "records", _read_record, _is_record)))
        except ImageFormatError as exc:
            raise UsageError(f"overlay {exc.message}", exc.hint) from None
    return overlays


def _read_record(path: str) -> dict[str, Any]:
    from envbuild.inventory.overlayfile import read_overlay_record

    return read_overlay_record(path)


def _is_record(record: Any) -> bool:
    """What envrun reads of a cached record: the mount point it binds (absolute) and the base it was made for."""
    mount, base = record.get("mount"), record.get("base")
    return type(mount) is str and mount.startswith("/") and (base is None or type(base) is dict)


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
    """The SIF header's image id as envbuild.sif.reader shows it, None for a file that is not a SIF."""
    from envbuild.sif.format import HEADER, MAGIC

    try:
        with open(path, "rb") as handle:
            raw = handle.read(HEADER.size)
    except OSError:
        return None
    if len(raw) < HEADER.size or raw[32:42] != MAGIC:
        return None
    text = HEADER.unpack_from(raw)[4].hex()
    return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"


def file_digest(path: str) -> str:
    """"sha256:<hex>" of the file, computed once per (absolute path, size, mtime_ns)."""
    return cached_per_file(path, "digests", _sha256, _is_digest)


def _is_digest(value: Any) -> bool:
    return type(value) is str and value.startswith("sha256:") and len(value) == 71


def _sha256(path: str) -> str:
    import hashlib

    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(4 << 20), b""):
            digest.update(block)
    return f"sha256:{digest.hexdigest()}"


def checked_overlays(overlays: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    """The overlays, refused when the runtime's bind syntax cannot carry them or two share a mount point
    (the later one would hide the earlier one entirely)."""
    seen: dict[str, str] = {}
    for path, mount in overlays:
        for word, what in ((path, "overlay file"), (mount, "mount point")):
            if ":" in word or "," in word:
                raise UsageError(f"{what} {word} contains ':' or ',', which --bind cannot carry",
                                 "rename or move the overlay file (or build it with another mount point)")
        if mount in seen:
            raise UsageError(f"overlays {seen[mount]} and {path} both mount at {mount}: the later one would hide the first",
                             "build one of them with another mount point (overlay mount in its spec), or put both "
                             "sets of packages into one overlay")
        seen[mount] = path
    return overlays
