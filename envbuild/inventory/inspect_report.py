"""Text and JSON forms of `envbuild inspect` (pure)."""

from __future__ import annotations

import datetime
import json
from collections import Counter
from dataclasses import asdict
from typing import Any

from envbuild.inventory.imagefacts import FILES, STOCK_SCRIPTS, ImageFacts
from envbuild.shared.overlayformat import LOCK_FILE, SPEC_FILE
from envbuild.shared.terminaltext import printable
from envbuild.store.entries import human_size


def _when(seconds: int) -> str:
    return datetime.datetime.fromtimestamp(seconds, tz=datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _indented(text: str) -> list[str]:
    # Split at "\n" only: a "\r" stays in its line, to be shown escaped, not drawn over the line's start.
    lines = text.rstrip("\n").split("\n") if text.strip("\n") else []
    return [_BLOCK + line for line in lines] or [_BLOCK + "(empty)"]


# Lines of a script, spec or lock shown as a block keep their tabs; every other line is one field.
_BLOCK = "    "


def _shown(lines: list[str]) -> str:
    """The report's lines as text for a terminal: whatever came from the image shown escaped."""
    return "\n".join(printable(line, keep_tabs=line.startswith(_BLOCK)) for line in lines) + "\n"


def _objects(facts: ImageFacts) -> list[str]:
    lines = ["objects:"]
    for obj in facts.objects:
        text = f"  {obj['id']:>3}  {obj['type']:<14} {human_size(obj['size']):>10}"
        if obj["type"] == "partition":
            text += f"  {obj['fs_type']}, {obj['part_type']}, {obj['arch']}"
            if "compression" in obj:
                text += f", {obj['compression']}, block {human_size(obj['block_size'])}, {obj['inodes']} inodes"
        lines.append(text)
    return lines


def _environments(facts: ImageFacts) -> list[str]:
    counts = Counter((p.environment, p.source) for p in facts.inventory.packages)
    lines = ["python environments:"]
    for env in facts.inventory.environments:
        parts = [env.kind]
        if env.python:
            parts.append(f"python {env.python}")
        parts.append(f"{counts[(env.prefix, 'pip')]} pip")
        if env.kind == "conda":
            parts.append(f"{counts[(env.prefix, 'conda')]} conda")
        lines.append(f"  {env.prefix}  ({', '.join(parts)})")
    if not facts.inventory.environments:
        lines.append("  (none found)")
    return lines


def _value(value: object) -> str:
    return "(none)" if value in (None, "") else str(value)


def _python_lines(facts: ImageFacts, python: dict[str, Any]) -> list[str]:
    lines = ["python (the base's interpreter, which the overlay's venv runs):",
             f"  path:        {_value(python.get('path'))}",
             f"  version:     {_value(python.get('version'))} (ABI {_value(python.get('abi'))})",
             f"  environment: {_value(python.get('env'))}",
             f"  activation:  {_value(python.get('activation'))}",
             f"  chosen:      {_value(python.get('why'))}"]
    venv = facts.inventory.overlay
    if venv is not None:
        seen = [f"{venv.mount}/lib/python{venv.python}/site-packages (its own)"]
        seen += [f"{site} (_envbuild_base.pth)" for site in venv.base_site_dirs]
        if venv.system_site:
            seen.append(f"the site of the interpreter in {venv.home or '?'} (include-system-site-packages)")
        lines.append("  sees, in order:")
        lines += [f"    {entry}" for entry in seen]
    return lines


def _overlay_lines(facts: ImageFacts) -> list[str]:
    record = facts.overlay or {}
    base, packages = record.get("base") or {}, record.get("packages") or {}
    spec, lock = record.get("spec") or {}, record.get("lock")
    installer = record.get("installer") or {}
    lines = [f"  name {_value(record.get('name'))}, system {_value(record.get('system'))}, built "
             f"{_value(record.get('built_at'))} by envbuild {_value(record.get('envbuild_version'))}"
             + (f" with {installer.get('name')} {installer.get('version')}" if installer else ""),
             f"  mount: {record['mount']}  (apptainer exec --bind {facts.path}:{record['mount']}:image-src=/ BASE.sif ...)",
             "base it was made for:",
             f"  ref:    {_value(base.get('ref'))}",
             f"  path:   {_value(base.get('path'))} (at build time)",
             f"  digest: {_value(base.get('digest'))}",
             f"  SIF id: {_value(base.get('sif_id'))}",
             f"  size:   {_value(base.get('size'))} bytes"]
    lines += _python_lines(facts, record.get("python") or {})
    added, kept = packages.get("added") or [], packages.get("kept") or []
    lines.append(f"packages: {len(added)} added in the overlay, {len(kept)} kept from the base")
    for title, pins in (("added", added), ("kept", kept)):
        lines += [f"  {title + ':' if index == 0 else '':<7}{pin}" for index, pin in enumerate(pins)]
    lines.append(f"requirements: {', '.join(record.get('requirements') or []) or '(none)'}")
    lines.append(f"spec: {_value(spec.get('name'))}, sha256 {_value(spec.get('sha256'))}")
    lines.append(f"lock: sha256 {lock.get('sha256')}, python {lock.get('python')}" if isinstance(lock, dict)
                 else "lock: (none: built without a lock)")
    lines.append(f"key: {_value(record.get('key'))}")
    return lines


def _render_squashfs(facts: ImageFacts) -> str:
    block = facts.squashfs or {}
    lines = [f"overlay: {facts.path}" if facts.overlay is not None else f"squashfs: {facts.path}",
             f"  {human_size(facts.file_size)} ({facts.file_size} bytes), squashfs {block.get('version')}, "
             f"{block.get('compression')}, block {human_size(block.get('block_size', 0))}, "
             f"{block.get('inodes')} inodes (files, directories, links), made {_when(block.get('created_at', 0))}"]
    if facts.overlay is None:
        lines.append("  no .envbuild/overlay.json: not an envbuild overlay (shown at its own root)")
    else:
        lines += _overlay_lines(facts)
    lines += _environments(facts)
    spec, lock = facts.envbuild.get("spec"), facts.envbuild.get("lock")
    mount = (facts.overlay or {}).get("mount", "").rstrip("/")
    for title, text, path in (("spec", spec, f"{mount}/{SPEC_FILE}"), ("lock", lock, f"{mount}/{LOCK_FILE}")):
        if facts.overlay is not None:
            lines.append(f"envbuild {title} ({path}):" if text is not None else f"envbuild {title}: (absent)")
            if text is not None:
                lines += _indented(text)
    return _shown(lines)


def render_inspect(facts: ImageFacts) -> str:
    if facts.squashfs is not None:
        return _render_squashfs(facts)
    lines = [f"image: {facts.path}"]
    if facts.sif is not None:
        sif = facts.sif
        lines.append(f"  {human_size(facts.file_size)}, SIF {sif['version']}, {sif['arch']}, id {sif['id']}, "
                     f"created {_when(sif['created_at'])}")
        lines.append(f"  architecture: {facts.architecture or 'unknown'} (SIF header: {sif['arch']})")
        lines += _objects(facts)
    else:
        lines.append("  sandbox directory")
        lines.append(f"  architecture: {facts.architecture or 'unknown'} (its /bin/sh)")
    lines += _environments(facts)
    lines.append("labels:" if facts.labels else "labels: (none)")
    lines += [f"  {key}: {value}" for key, value in sorted(facts.labels.items())]
    lines.append("environment variables (as written in the start scripts):" if facts.environment else "environment variables: (none)")
    lines += [f"  {key}={value}" for key, value in facts.environment.items()]
    lines.append("start scripts (/.singularity.d/env):")
    for name, text in facts.env_scripts.items():
        if name in STOCK_SCRIPTS:
            lines.append(f"  {name} (apptainer's own)")
        else:
            lines.append(f"  {name}:")
            lines += _indented(text)
    lines.append("runscript:" if facts.runscript is not None else "runscript: (none)")
    if facts.runscript is not None:
        lines += _indented(facts.runscript)
    spec, record, lock = facts.envbuild.get("spec"), facts.envbuild.get("build_record"), facts.envbuild.get("lock")
    if spec is None and record is None:
        lines.append("envbuild: not built by envbuild (no /.envbuild)")
    else:
        lines.append(f"envbuild spec ({FILES['spec']}):" if spec is not None else "envbuild spec: (absent)")
        if spec is not None:
            lines += _indented(spec)
        if record is not None:
            lines.append(f"envbuild build record ({FILES['build_record']}):")
            lines += _indented(json.dumps(record, indent=2, sort_keys=True))
        lines.append(f"envbuild lock ({FILES['lock']}):" if lock is not None else "envbuild lock: (absent)")
        if lock is not None:
            lines += _indented(lock)
        freeze = facts.envbuild.get("pip_freeze_lines")
        if freeze is not None:
            lines.append(f"pip freeze at build time: {freeze} lines in {FILES['pip_freeze']}")
    return _shown(lines)


def inspect_to_dict(facts: ImageFacts) -> dict[str, Any]:
    return asdict(facts)
