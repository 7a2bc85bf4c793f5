"""The catalogue's data (pure): images read (or why not), and the packages x images matrix with the
cells that differ marked, and its JSON form (`catalogue.json` beside `index.html`: the page's data for scripts).
The HTML page (envbuild.catalogue.page) and the JSON file are two renderings of this one model."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any

from envbuild.catalogue.summary import ImageSummary, summarize
from envbuild.inventory.imagefacts import ImageFacts
from envbuild.inventory.listing import ABSENT, ImageResult, image_labels, matrix, package_rows
from envbuild.inventory.pkgmeta import canonical_name
from envbuild.inventory.pyenvs import Inventory

# A cell's state: the row's most common version, another one, or no such package in the image.
COMMON, OTHER, MISSING = "common", "other", "absent"


@dataclass(frozen=True)
class ImageEntry:
    """One image as found: its facts, or why they could not be read."""

    path: str
    facts: ImageFacts | None = None
    error: str = ""


@dataclass(frozen=True)
class Cell:
    text: str  # versions, "," between distinct ones across the image's environments; ABSENT when none
    state: str  # COMMON | OTHER | MISSING
    where: tuple[tuple[str, str, str], ...] = ()  # (environment, version, source) for each copy


@dataclass(frozen=True)
class PackageLine:
    name: str
    key: str  # the canonical name (PEP 503), what the search matches
    cells: tuple[Cell, ...]  # in the order of Catalogue.columns

    @property
    def differs(self) -> bool:
        """The images that have the package do not all have the same version(s)."""
        return any(cell.state == OTHER for cell in self.cells)

    @property
    def everywhere(self) -> bool:
        return all(cell.state != MISSING for cell in self.cells)


@dataclass(frozen=True)
class Catalogue:
    title: str
    generated_at: str
    envbuild_version: str
    images: tuple[ImageSummary, ...]  # every image given, in order, unreadable ones included
    columns: tuple[str, ...]  # paths of the readable images: the matrix's columns
    packages: tuple[PackageLine, ...]

    @property
    def failed(self) -> int:
        return sum(1 for image in self.images if image.error)

    def column_labels(self) -> tuple[str, ...]:
        labels = {image.path: image.label for image in self.images}
        return tuple(labels[path] for path in self.columns)


def _states(texts: list[str]) -> list[str]:
    present = [t for t in texts if t != ABSENT]
    # Ties go to the version seen first (the leftmost image), so the marks do not depend on sorting.
    common = Counter(present).most_common(1)[0][0] if present else None
    return [MISSING if t == ABSENT else COMMON if t == common else OTHER for t in texts]


def package_lines(inventories: list[tuple[str, Inventory]]) -> list[PackageLine]:
    """Rows of the matrix, by canonical name; columns are the given images in order."""
    paths = [path for path, _ in inventories]
    rows = package_rows([ImageResult(path, inventory) for path, inventory in inventories])
    where: dict[tuple[str, str], list[tuple[str, str, str]]] = {}
    for row in rows:
        where.setdefault((canonical_name(row.package), row.image), []).append((row.environment, row.version, row.source))
    lines = []
    for name, by_image in matrix(rows, paths).items():
        key = canonical_name(name)
        texts = [by_image[path] for path in paths]
        cells = tuple(Cell(text, state, tuple(where.get((key, path), ())))
                      for text, state, path in zip(texts, _states(texts), paths, strict=True))
        lines.append(PackageLine(name, key, cells))
    return lines


def build_catalogue(entries: list[ImageEntry], *, generated_at: str, envbuild_version: str,
                    title: str = "Image catalogue") -> Catalogue:
    labels = image_labels([entry.path for entry in entries])
    images = tuple(
        summarize(entry.path, entry.facts, labels[entry.path]) if entry.facts is not None
        else ImageSummary(path=entry.path, label=labels[entry.path], error=entry.error or "could not be read")
        for entry in entries
    )
    readable = [(entry.path, entry.facts.inventory) for entry in entries if entry.facts is not None]
    return Catalogue(title=title, generated_at=generated_at, envbuild_version=envbuild_version, images=images,
                     columns=tuple(path for path, _ in readable), packages=tuple(package_lines(readable)))


# --- the JSON form ----------------------------------------------------------------------------------------------

# Bump when a key changes meaning or goes away (adding keys does not bump it).
CATALOGUE_FORMAT = 1


def catalogue_to_dict(catalogue: Catalogue) -> dict[str, Any]:
    images = []
    for image in catalogue.images:
        entry = asdict(image)
        entry["error"] = image.error or None
        entry["environments"] = [asdict(env) for env in image.environments]
        entry["problems"] = list(image.problems)
        images.append(entry)
    packages = []
    for line in catalogue.packages:
        packages.append({
            "name": line.name,
            "key": line.key,
            "differs": line.differs,  # the images that have it do not all have the same version(s)
            "in_every_image": line.everywhere,
            # Per image path: the cell as shown, its mark, and where each copy is installed.
            "images": {
                path: {"versions": cell.text, "state": cell.state,
                       "where": [{"environment": env, "version": version, "source": source}
                                 for env, version, source in cell.where]}
                for path, cell in zip(catalogue.columns, line.cells, strict=True)
            },
        })
    return {
        "catalogue_format": CATALOGUE_FORMAT,
        "title": catalogue.title,
        "generated_at": catalogue.generated_at,
        "envbuild_version": catalogue.envbuild_version,
        "images": images,
        "columns": list(catalogue.columns),
        "packages": packages,
    }


def render_json(catalogue: Catalogue) -> str:
    return json.dumps(catalogue_to_dict(catalogue), indent=2) + "\n"
