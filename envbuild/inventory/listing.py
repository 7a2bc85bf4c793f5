"""Turn inventories of several images into rows, a table, a packages-by-images matrix, or JSON (pure)."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from typing import Any

from envbuild.inventory.inventorycache import inventory_to_dict
from envbuild.inventory.pkgmeta import canonical_name
from envbuild.inventory.pyenvs import Inventory
from envbuild.shared.terminaltext import printable

ABSENT = "-"


@dataclass(frozen=True)
class ImageResult:
    """One image as given on the command line: its inventory, or why it could not be read."""

    path: str
    inventory: Inventory | None = None
    error: str = ""
    arch: str = ""  # x86_64, aarch64 (envbuild.inventory.image.image_arch); "" unknown, or an overlay alone


@dataclass(frozen=True, order=True)
class Row:
    image: str
    environment: str
    package: str
    version: str
    source: str
    arch: str = ""


def package_rows(results: list[ImageResult], pattern: re.Pattern[str] | None = None) -> list[Row]:
    """Rows in command-line image order, then environment, package and source."""
    rows = []
    for result in results:
        if result.inventory is None:
            continue
        image_rows = [
            Row(result.path, p.environment, p.name, p.version, p.source, result.arch)
            for p in result.inventory.packages
            if pattern is None or pattern.search(p.name)
        ]
        rows += sorted(image_rows, key=lambda r: (r.environment, canonical_name(r.package), r.source))
    return rows


def _columns(header: tuple[str, ...], body: list[tuple[str, ...]]) -> str:
    """Aligned text columns; every cell is shown escaped (names and versions come from the image)."""
    header = tuple(printable(cell) for cell in header)
    body = [tuple(printable(cell) for cell in cells) for cells in body]
    widths = [max(len(cell) for cell in column) for column in zip(header, *body, strict=False)]
    lines = []
    for cells in (header, *body):
        lines.append("  ".join(cell.ljust(width) for cell, width in zip(cells, widths, strict=True)).rstrip())
    return "\n".join(lines) + "\n"


def render_table(rows: list[Row]) -> str:
    if not rows:
        return ""
    return _columns(("IMAGE", "ARCH", "ENVIRONMENT", "PACKAGE", "VERSION", "SOURCE"),
                    [(r.image, r.arch or ABSENT, r.environment, r.package, r.version, r.source) for r in rows])


def _short(path: str) -> str:
    # A base with overlays is "base.sif + x.sqsh": each part is shortened, not the whole.
    return " + ".join(os.path.basename(part.rstrip("/")) or part for part in path.split(" + "))


def image_labels(paths: list[str]) -> dict[str, str]:
    """Short column names for images: the file name, or the whole path where two file names clash."""
    names = [_short(p) for p in paths]
    return {p: (n if names.count(n) == 1 else p) for p, n in zip(paths, names, strict=True)}


def matrix(rows: list[Row], images: list[str]) -> dict[str, dict[str, str]]:
    """package -> image -> versions ("," between distinct versions across the image's environments)."""
    cells: dict[str, dict[str, list[str]]] = {}
    display: dict[str, str] = {}
    for row in rows:
        key = canonical_name(row.package)
        display.setdefault(key, row.package)
        versions = cells.setdefault(key, {}).setdefault(row.image, [])
        if row.version not in versions:
            versions.append(row.version)
    return {
        display[key]: {image: ",".join(cells[key].get(image, [])) or ABSENT for image in images}
        for key in sorted(cells)
    }


def render_matrix(rows: list[Row], images: list[str]) -> str:
    table = matrix(rows, images)
    if not table:
        return ""
    labels = image_labels(images)
    header = ("PACKAGE", *(labels[i] for i in images))
    return _columns(header, [(name, *(by_image[i] for i in images)) for name, by_image in table.items()])


def render_json(results: list[ImageResult], rows: list[Row], *, with_matrix: bool) -> str:
    images: list[dict[str, Any]] = []
    for result in results:
        entry: dict[str, Any] = {"path": result.path, "error": result.error or None, "architecture": result.arch or None}
        if result.inventory is not None:
            data = inventory_to_dict(result.inventory)
            entry["environments"] = data["environments"]
            entry["problems"] = data["problems"]
            if data["overlay"] is not None:
                entry["overlay"] = data["overlay"]
        images.append(entry)
    document: dict[str, Any] = {"images": images}
    if with_matrix:
        document["matrix"] = matrix(rows, [r.path for r in results if r.inventory is not None])
    else:
        document["packages"] = [
            {"image": r.image, "environment": r.environment, "name": r.package, "version": r.version, "source": r.source}
            for r in rows
        ]
    return json.dumps(document, indent=2) + "\n"


def problem_warnings(label: str, inventory: Inventory) -> str:
    """What went wrong reading the image labelled `label`, one warning line per problem (its paths and messages
    come from the image: escaped)."""
    return "".join(printable(f"warning: {label}: {problem.path}: {problem.message}") + "\n"
                   for problem in inventory.problems)
