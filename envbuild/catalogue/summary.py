"""One image's line in the catalogue (pure): what a site admin asks before pointing users at it.
Everything comes from envbuild.inventory's ImageFacts (read from the file, no container started);
this module only chooses and words it."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from envbuild.inventory.imagefacts import ImageFacts
from envbuild.sif.compression import COMPRESSIONS, compression_note

# Labels `apptainer build` writes from the definition file's header (Bootstrap:, From:): the base of an
# image that envbuild did not build.
BOOTSTRAP_LABEL = "org.label-schema.usage.singularity.deffile.bootstrap"
FROM_LABEL = "org.label-schema.usage.singularity.deffile.from"
# Bootstrap agents whose source apptainer also takes as a URI (docker://rocm/pytorch, library://...).
URI_BOOTSTRAPS = ("docker", "docker-daemon", "docker-archive", "oci", "oci-archive", "library", "oras", "shub")
ENVBUILD_BASE_LABEL = "org.envbuild.base"  # envbuild.builder.plan.record.image_labels
EVERY_RUNTIME = "every apptainer and singularity"


@dataclass(frozen=True)
class EnvironmentLine:
    prefix: str
    kind: str  # venv | conda | system
    python: str
    packages: int


@dataclass(frozen=True)
class ImageSummary:
    path: str
    label: str  # the short column name (file name, or the path where two names clash)
    error: str = ""  # why the file could not be read; the other fields are then empty
    kind: str = ""  # SIF | overlay | squashfs | sandbox
    arch: str = ""
    size: int | None = None  # bytes; None for a sandbox directory
    compression: str = ""
    runtime: str = ""  # which container runtimes can run it
    runtime_limited: bool = False  # True when not every runtime can
    base: str = ""
    build: dict[str, str] = field(default_factory=dict)  # short facts from the build record, in display order
    build_record: dict[str, Any] | None = None  # the whole record (an image's build.json or an overlay's record)
    labels: dict[str, str] = field(default_factory=dict)
    environments: tuple[EnvironmentLine, ...] = ()
    problems: tuple[str, ...] = ()
    packages: int = 0


def _kind(facts: ImageFacts) -> str:
    if facts.sif is not None:
        return "SIF"
    if facts.overlay is not None:
        return "overlay"
    return "squashfs" if facts.squashfs is not None else "sandbox"


def compression_of(facts: ImageFacts) -> str:
    """The root file system's squashfs compression ("" for a sandbox directory)."""
    if facts.squashfs is not None:
        return str(facts.squashfs.get("compression") or "")
    for obj in facts.objects:
        if obj.get("type") == "partition" and "compression" in obj:  # only the primary partition has it
            return str(obj["compression"])
    return ""


def runtime_requirement(compression: str) -> tuple[str, bool]:
    """(who can run an image with this compression, whether that excludes some runtimes). The facts are
    envbuild.sif.writer's: a compression it writes without a note runs everywhere."""
    if not compression:
        return "", False
    note = compression_note(compression)
    if note is not None:
        return note, True
    if compression in COMPRESSIONS:
        return EVERY_RUNTIME, False
    return (f"{compression}: a compression envbuild does not write, not checked "
            f"(known: {', '.join(COMPRESSIONS)})"), True


def _get(record: dict[str, Any] | None, dotted: str) -> str:
    value: Any = record
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return "" if value in (None, "", [], {}) else str(value)


def base_of(facts: ImageFacts, record: dict[str, Any] | None) -> str:
    """What the image was built from (an overlay: the image it was made for)."""
    from_record = _get(record, "base.ref")
    if from_record:
        return from_record
    if facts.labels.get(ENVBUILD_BASE_LABEL):
        return facts.labels[ENVBUILD_BASE_LABEL]
    bootstrap, source = facts.labels.get(BOOTSTRAP_LABEL, ""), facts.labels.get(FROM_LABEL, "")
    if not (bootstrap and source):
        return source or bootstrap
    if bootstrap in URI_BOOTSTRAPS:
        return f"{bootstrap}://{source}"
    # localimage:/path as envbuild specs write it; debootstrap, yum and the like name a release
    return f"{bootstrap}:{source}"


def _installer(record: dict[str, Any]) -> str:
    installer = record.get("installer")
    if isinstance(installer, dict):  # an overlay's record: {"name", "version"}
        return " ".join(str(installer.get(k) or "") for k in ("name", "version")).strip()
    return str(installer or "")


def build_facts(record: dict[str, Any] | None, overlay: bool) -> dict[str, str]:
    """The record's facts worth a glance, in display order; {} when the image was not built by envbuild."""
    if not record:
        return {}
    lock = _get(record, "lock.sha256")
    facts = {
        "built": _get(record, "built_at"),
        "envbuild": _get(record, "envbuild_version"),
        "spec": _get(record, "spec.name"),
        "system": _get(record, "system"),
        "installer": _installer(record),
        # The runtime the build ran in (not a requirement: "Runs on" says who can run the image). An
        # overlay's record names none: it is squashed by mksquashfs alone.
        "build runtime": "" if overlay else _get(record, "runtime.version"),
        "compression": _get(record, "compression"),
        "mount": _get(record, "mount") if overlay else "",
        "lock": f"sha256 {lock[:12]}" if lock else "none",
    }
    return {key: value for key, value in facts.items() if value}


def summarize(path: str, facts: ImageFacts, label: str) -> ImageSummary:
    """The image at `path` (as given on the command line) from its facts."""
    overlay = facts.overlay is not None
    record = facts.overlay if overlay else facts.envbuild.get("build_record")
    if not isinstance(record, dict):
        record = None
    compression = compression_of(facts)
    runtime, limited = runtime_requirement(compression)
    counts = Counter(p.environment for p in facts.inventory.packages)
    kind = _kind(facts)
    return ImageSummary(
        path=path, label=label, kind=kind, arch=str((facts.sif or {}).get("arch") or ""),
        size=None if kind == "sandbox" else facts.file_size, compression=compression,
        runtime=runtime, runtime_limited=limited, base=base_of(facts, record),
        build=build_facts(record, overlay), build_record=record, labels=dict(sorted(facts.labels.items())),
        environments=tuple(EnvironmentLine(e.prefix, e.kind, e.python, counts[e.prefix]) for e in facts.inventory.environments),
        problems=tuple(f"{p.path}: {p.message}" for p in facts.inventory.problems),
        packages=len(facts.inventory.packages),
    )
