"""`envbuild packages`: the Python packages in every environment of images, read from the files (or, for
encrypted images, by starting them), with venv overlays combined as their Python sees them.

Meant to answer in a fraction of the time a container takes to start. Images the index knows are answered
from it after one stat each, with nothing of the reader imported (tests/test_architecture.py keeps this
path light); the others are read in parallel (envbuild.inventory.parallelread). What only --overlay and
--via-runtime need is imported when they are given."""

from __future__ import annotations

from envbuild.inventory.inventorycache import InventoryCache
from envbuild.inventory.listing import ImageResult, package_rows, problem_warnings, render_matrix, render_table
from envbuild.shared.errors import EXIT_CLEAN, EXIT_PROBLEMS, ImageFormatError, UsageError
from envbuild.shared.terminaltext import printable_lines

TYPE_CHECKING = False
if TYPE_CHECKING:
    import re
    from collections.abc import Callable, Sequence
    from typing import Any, TextIO

    from envbuild.inventory.pyenvs import Inventory


def list_packages(images: Sequence[str], *, pattern: str | None, as_json: bool, as_matrix: bool,
                  overlays: Sequence[str], no_cache: bool, via_runtime: bool, out: TextIO, err: TextIO) -> int:
    """The listing on `out` (a table, the matrix or JSON), what could not be read on `err`; EXIT_PROBLEMS when an
    image could not be read (the others are listed)."""
    regex = _name_pattern(pattern) if pattern else None
    if overlays and via_runtime:
        raise UsageError("--overlay combines files read here; --via-runtime starts each image instead",
                         "leave out --via-runtime (overlays are never encrypted), or list the base alone with it")
    cache = InventoryCache(enabled=not (no_cache or via_runtime))
    if overlays or via_runtime:
        results = _results_one_by_one(images, overlays, cache, via_runtime, err)
    else:
        results = _results_from_index(images, cache, err)
    rows = package_rows(results, regex)  # type: ignore[arg-type]  # a _Literal searches as a pattern does
    readable = [r.path for r in results if r.inventory is not None]
    if as_json:
        from envbuild.inventory.listing import render_json

        out.write(render_json(results, rows, with_matrix=as_matrix))
    elif as_matrix:
        out.write(render_matrix(rows, readable))
    else:
        out.write(render_table(rows))
    failed = len(results) - len(readable)
    if not failed:
        return EXIT_CLEAN
    err.write(f"{failed} of {len(results)} image{'s' if len(results) != 1 else ''} could not be read\n")
    return EXIT_PROBLEMS


class _Literal:
    """--grep of letters, digits, "-" and "_" only (the usual `--grep torch`): found as re.IGNORECASE finds it,
    without importing re. In an ASCII name that is a search of the lower-cased name; a name with other
    characters (the Kelvin sign matches "k" under re's case folding) is asked of re itself."""

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern
        self.lower = pattern.lower()
        self._regex: re.Pattern[str] | None = None

    def search(self, name: str) -> bool:
        if name.isascii():
            return self.lower in name.lower()
        if self._regex is None:
            import re

            self._regex = re.compile(self.pattern, re.IGNORECASE)
        return self._regex.search(name) is not None


def _name_pattern(pattern: str) -> re.Pattern[str] | _Literal:
    if pattern.isascii() and pattern.replace("-", "").replace("_", "").isalnum():
        return _Literal(pattern)
    import re

    try:
        return re.compile(pattern, re.IGNORECASE)
    except re.error as exc:
        raise UsageError(f"--grep {pattern!r} is not a valid regular expression: {exc}",
                         "use Python regex syntax, e.g. --grep '^torch' or --grep 'lightning|transformers'") from None


def _results_from_index(images: Sequence[str], cache: InventoryCache, err: TextIO) -> list[ImageResult]:
    """Each image from the index when it knows the file as it is now, else read (all those at once, in
    parallel); in command-line order, each image's warnings or error on `err` in that order."""
    known: dict[str, dict[str, Any] | ImageFormatError] = {}
    for path in images:
        if path not in known:
            entry = cache.listing_entry(path)
            if entry is not None:
                known[path] = entry
    missing = list(dict.fromkeys(path for path in images if path not in known))
    if missing:
        from envbuild.inventory.parallelread import read_listings

        known.update(read_listings(missing, cache))
    results = []
    for path in images:
        answer = known[path]
        if isinstance(answer, ImageFormatError):
            err.write(printable_lines(answer.render()) + "\n")
            results.append(ImageResult(path, error=answer.message))
            continue
        err.write(problem_warnings(path, answer))
        results.append(ImageResult(path, answer, arch=answer["arch"]))
    return results


def _results_one_by_one(images: Sequence[str], overlays: Sequence[str], cache: InventoryCache, via_runtime: bool,
                        err: TextIO) -> list[ImageResult]:
    """--overlay and --via-runtime: each image read (or started) in turn, its overlays combined with it."""
    from envbuild.inventory.image import image_arch

    read = _runtime_reader() if via_runtime else cache.inventory
    mounted = _overlay_inventories(overlays, cache)
    results = []
    for path in images:
        label = _combined(path, overlays)
        try:
            inventory = read(path)
            if mounted:
                inventory = _overlaid(path, inventory, mounted)
        except ImageFormatError as exc:
            err.write(printable_lines(exc.render()) + "\n")
            results.append(ImageResult(label, error=exc.message))
            continue
        err.write(problem_warnings(label, inventory))
        results.append(ImageResult(label, inventory, arch=image_arch(path)))
    return results


def _runtime_reader() -> Callable[[str], Inventory]:
    """--via-runtime: each image started with apptainer/singularity (never cached); an overlay is refused."""
    from envbuild.host.runtime import require_runtime
    from envbuild.inventory.overlayfile import is_overlay_file
    from envbuild.inventory.via_runtime import read_inventory_via_runtime

    runtime = require_runtime()

    def read(path: str) -> Inventory:
        if is_overlay_file(path):
            raise ImageFormatError(path, "is a venv overlay: it is read from the file, not started",
                                   "list it without --via-runtime")
        return read_inventory_via_runtime(path, runtime.path)

    return read


def _overlay_inventories(overlays: Sequence[str], cache: InventoryCache) -> list[tuple[str, Inventory]]:
    """Each --overlay's inventory, read once for all images; a file that is no overlay stops the command."""
    if not overlays:
        return []
    from envbuild.inventory.combine import require_overlay

    mounted = [(path, cache.inventory(path)) for path in overlays]
    for path, inventory in mounted:
        require_overlay(path, inventory)
    return mounted


def _combined(path: str, overlays: Sequence[str]) -> str:
    if not overlays:
        return path
    from envbuild.inventory.combine import combined_label

    return combined_label(path, list(overlays))


def _overlaid(path: str, inventory: Inventory, mounted: list[tuple[str, Inventory]]) -> Inventory:
    from envbuild.inventory.combine import overlaid_inventory
    from envbuild.inventory.image import sif_image_id

    return overlaid_inventory(path, inventory, sif_image_id(path), mounted)
