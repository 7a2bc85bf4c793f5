"""Turn inventories of several images into rows, a table, a packages-by-images matrix, or JSON (pure).

Light at import (no dataclasses, json, re or typing): `envbuild packages` answering from its index
(envbuild.inventory.inventorycache) renders through here with nothing of the reader loaded. An image's
inventory is either an Inventory (read just now) or the plain dict the index stores
(inventorycache.inventory_to_dict): both are shown alike."""

from __future__ import annotations

import os

from envbuild.inventory.pkgmeta import canonical_name
from envbuild.shared.terminaltext import printable

TYPE_CHECKING = False
if TYPE_CHECKING:
    import re
    from collections.abc import Iterator
    from typing import Any

    from envbuild.inventory.pyenvs import Inventory

ABSENT = "-"


class ImageResult:
    """One image as given on the command line: its inventory (an Inventory, or the index's plain dict of one),
    or why it could not be read. `arch`: x86_64, aarch64 (envbuild.inventory.image.image_arch); "" unknown, or
    an overlay alone."""

    __slots__ = ("arch", "error", "inventory", "path")

    def __init__(self, path: str, inventory: Inventory | dict[str, Any] | None = None, error: str = "",
                 arch: str = "") -> None:
        self.path = path
        self.inventory = inventory
        self.error = error
        self.arch = arch

    def __repr__(self) -> str:
        return f"ImageResult({self.path!r}, error={self.error!r}, arch={self.arch!r})"


class Row(tuple):  # type: ignore[type-arg]  # a named tuple by hand: collections' namedtuple costs an import
    """One package of one environment of one image; rows compare and sort as their fields in this order."""

    __slots__ = ()

    def __new__(cls, image: str, environment: str, package: str, version: str, source: str, arch: str = "") -> Row:
        return tuple.__new__(cls, (image, environment, package, version, source, arch))

    image = property(lambda self: self[0])
    environment = property(lambda self: self[1])
    package = property(lambda self: self[2])
    version = property(lambda self: self[3])
    source = property(lambda self: self[4])
    arch = property(lambda self: self[5])

    def __repr__(self) -> str:
        return f"Row{tuple.__repr__(self)}"


def _packages(inventory: Inventory | dict[str, Any]) -> Iterator[tuple[str, str, str, str]]:
    """(environment, name, version, source) of each package, from an Inventory or the index's dict."""
    if type(inventory) is dict:
        return ((p["environment"], p["name"], p["version"], p["source"]) for p in inventory["packages"])
    return ((p.environment, p.name, p.version, p.source) for p in inventory.packages)  # type: ignore[union-attr]


def _problems(inventory: Inventory | dict[str, Any]) -> list[tuple[str, str]]:
    if type(inventory) is dict:
        return [(p["path"], p["message"]) for p in inventory["problems"]]
    return [(p.path, p.message) for p in inventory.problems]  # type: ignore[union-attr]


def package_rows(results: list[ImageResult], pattern: re.Pattern[str] | None = None) -> list[Row]:
    """Rows in command-line image order, then environment, package and source."""
    rows = []
    for result in results:
        if result.inventory is None:
            continue
        image_rows = [
            Row(result.path, environment, name, version, source, result.arch)
            for environment, name, version, source in _packages(result.inventory)
            if pattern is None or pattern.search(name)
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
    import json

    images: list[dict[str, Any]] = []
    for result in results:
        entry: dict[str, Any] = {"path": result.path, "error": result.error or None, "architecture": result.arch or None}
        if result.inventory is not None:
            data = result.inventory
            if not isinstance(data, dict):
                from envbuild.inventory.inventorycache import inventory_to_dict

                data = inventory_to_dict(data)
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


def problem_warnings(label: str, inventory: Inventory | dict[str, Any]) -> str:
    """What went wrong reading the image labelled `label`, one warning line per problem (its paths and messages
    come from the image: escaped)."""
    return "".join(printable(f"warning: {label}: {path}: {message}") + "\n" for path, message in _problems(inventory))
