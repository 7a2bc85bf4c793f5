"""What changed from image A to image B: packages per environment, start-script variables, labels, and
for venv overlays what their records say they were made for (base, Python, mount) (pure)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from envbuild.inventory.imagefacts import ImageFacts
from envbuild.inventory.pkgmeta import canonical_name
from envbuild.inventory.pyenvs import Package
from envbuild.shared.terminaltext import printable


@dataclass(frozen=True)
class Change:
    key: str
    old: str | None  # None: added
    new: str | None  # None: removed

    @property
    def what(self) -> str:
        return "added" if self.old is None else "removed" if self.new is None else "changed"


@dataclass
class EnvironmentDiff:
    prefix: str
    status: str  # both | added | removed
    changes: list[Change] = field(default_factory=list)


@dataclass
class ImageDiff:
    a: str
    b: str
    environments: list[EnvironmentDiff] = field(default_factory=list)
    variables: list[Change] = field(default_factory=list)
    labels: list[Change] = field(default_factory=list)
    record: list[Change] = field(default_factory=list)  # overlay records; an image has none

    @property
    def identical(self) -> bool:
        return not (self.variables or self.labels or self.record
                    or any(e.status != "both" or e.changes for e in self.environments))


# What an overlay was made for and from: the record's fields that a diff shows. The build time, the
# envbuild version and the store key differ on every rebuild and would hide what matters.
RECORD_FIELDS = ("mount", "name", "system", "base.ref", "base.digest", "base.sif_id", "python.path", "python.version",
                 "python.abi", "python.env", "python.activation", "spec.sha256", "lock.sha256")


def record_fields(record: dict[str, Any] | None) -> dict[str, str]:
    """The RECORD_FIELDS of an overlay record that are set, as text; {} for an image (no record)."""
    fields = {}
    for key in RECORD_FIELDS if record else ():
        value: Any = record
        for part in key.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        if value not in (None, ""):
            fields[key] = str(value)
    return fields


def compare_maps(old: dict[str, str], new: dict[str, str]) -> list[Change]:
    return [Change(key, old.get(key), new.get(key)) for key in sorted(old.keys() | new.keys()) if old.get(key) != new.get(key)]


def _package_map(packages: list[Package], prefix: str) -> dict[str, str]:
    """'name (source)' -> version(s) for one environment; the display name is the first seen."""
    result: dict[str, str] = {}
    names: dict[tuple[str, str], str] = {}
    for p in packages:
        if p.environment != prefix:
            continue
        ident = (canonical_name(p.name), p.source)
        key = names.setdefault(ident, f"{p.name} ({p.source})")
        result[key] = f"{result[key]},{p.version}" if key in result else p.version
    return result


def diff_images(a: ImageFacts, b: ImageFacts) -> ImageDiff:
    result = ImageDiff(a=a.path, b=b.path)
    prefixes_a = {e.prefix for e in a.inventory.environments}
    prefixes_b = {e.prefix for e in b.inventory.environments}
    for prefix in sorted(prefixes_a | prefixes_b):
        status = "both" if prefix in prefixes_a and prefix in prefixes_b else "added" if prefix in prefixes_b else "removed"
        changes = compare_maps(_package_map(a.inventory.packages, prefix), _package_map(b.inventory.packages, prefix))
        result.environments.append(EnvironmentDiff(prefix, status, changes))
    result.variables = compare_maps(a.environment, b.environment)
    result.labels = compare_maps(a.labels, b.labels)
    result.record = compare_maps(record_fields(a.overlay), record_fields(b.overlay))
    return result


def _change_line(change: Change) -> str:
    if change.old is None:
        return f"  + {change.key} {change.new}"
    if change.new is None:
        return f"  - {change.key} {change.old}"
    return f"  ~ {change.key} {change.old} -> {change.new}"


def render_diff(diff: ImageDiff) -> str:
    """The diff as text for a terminal: each line escaped (names, versions, labels come from the images)."""
    return "\n".join(printable(line) for line in _diff_lines(diff)) + "\n"


def _diff_lines(diff: ImageDiff) -> list[str]:
    lines = [f"--- {diff.a}", f"+++ {diff.b}"]
    if diff.identical:
        return [*lines, "no differences in packages, environment variables, labels or overlay records"]
    for env in diff.environments:
        if env.status == "both" and not env.changes:
            continue
        title = {"both": "", "added": " (only in B)", "removed": " (only in A)"}[env.status]
        counts = {what: sum(1 for c in env.changes if c.what == what) for what in ("added", "removed", "changed")}
        summary = ", ".join(f"{n} {what}" for what, n in counts.items() if n)
        lines.append(f"environment {env.prefix}{title}: {summary or 'no packages'}")
        lines += [_change_line(c) for c in env.changes]
    if diff.variables:
        lines.append("environment variables (/.singularity.d/env/*.sh, as written):")
        lines += [_change_line(c) for c in diff.variables]
    if diff.labels:
        lines.append("labels:")
        lines += [_change_line(c) for c in diff.labels]
    if diff.record:
        lines.append("overlay record (.envbuild/overlay.json):")
        lines += [_change_line(c) for c in diff.record]
    return lines


def diff_to_dict(diff: ImageDiff) -> dict[str, Any]:
    def changes(items: list[Change]) -> list[dict[str, Any]]:
        return [{"key": c.key, "change": c.what, "old": c.old, "new": c.new} for c in items]

    return {
        "a": diff.a, "b": diff.b, "identical": diff.identical,
        "environments": [{"prefix": e.prefix, "status": e.status, "packages": changes(e.changes)} for e in diff.environments],
        "environment_variables": changes(diff.variables),
        "labels": changes(diff.labels),
        "overlay_record": changes(diff.record),
    }
