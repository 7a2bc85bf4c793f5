"""Text and JSON forms of `envbuild inspect` (pure)."""

from __future__ import annotations

import datetime
import json
from collections import Counter
from dataclasses import asdict
from typing import Any

from envbuild.inventory.envscripts import STOCK_SCRIPTS
from envbuild.inventory.facts import FILES, ImageFacts


def human_size(size: int) -> str:
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{size} B"


def _when(seconds: int) -> str:
    return datetime.datetime.fromtimestamp(seconds, tz=datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _indented(text: str) -> list[str]:
    return ["    " + line for line in text.rstrip("\n").splitlines()] or ["    (empty)"]


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


def render_inspect(facts: ImageFacts) -> str:
    lines = [f"image: {facts.path}"]
    if facts.sif is not None:
        sif = facts.sif
        lines.append(f"  {human_size(facts.file_size)}, SIF {sif['version']}, {sif['arch']}, id {sif['id']}, "
                     f"created {_when(sif['created_at'])}")
        lines += _objects(facts)
    else:
        lines.append("  sandbox directory")
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
    return "\n".join(lines) + "\n"


def inspect_to_dict(facts: ImageFacts) -> dict[str, Any]:
    return asdict(facts)
