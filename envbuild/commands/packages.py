"""`envbuild packages`: the Python packages in every environment of images, read from the files (or, for
encrypted images, by starting them), with venv overlays combined as their Python sees them.

Meant to answer in a fraction of the time a container takes to start: what only --overlay and --via-runtime
need is imported when they are given."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from envbuild.inventory.image import image_arch, sif_image_id
from envbuild.inventory.inventorycache import InventoryCache
from envbuild.inventory.listing import ImageResult, package_rows, problem_warnings, render_json, render_matrix, render_table
from envbuild.inventory.overlayfile import is_overlay_file
from envbuild.shared.errors import EXIT_CLEAN, EXIT_PROBLEMS, ImageFormatError, UsageError
from envbuild.shared.terminaltext import printable_lines

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import TextIO

    from envbuild.inventory.pyenvs import Inventory


def list_packages(images: Sequence[str], *, pattern: str | None, as_json: bool, as_matrix: bool,
                  overlays: Sequence[str], no_cache: bool, via_runtime: bool, out: TextIO, err: TextIO) -> int:
    """The listing on `out` (a table, the matrix or JSON), what could not be read on `err`; EXIT_PROBLEMS when an
    image could not be read (the others are listed)."""
    try:
        regex = re.compile(pattern, re.IGNORECASE) if pattern else None
    except re.error as exc:
        raise UsageError(f"--grep {pattern!r} is not a valid regular expression: {exc}",
                         "use Python regex syntax, e.g. --grep '^torch' or --grep 'lightning|transformers'") from None
    if overlays and via_runtime:
        raise UsageError("--overlay combines files read here; --via-runtime starts each image instead",
                         "leave out --via-runtime (overlays are never encrypted), or list the base alone with it")
    cache = InventoryCache(enabled=not (no_cache or via_runtime))
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
    rows = package_rows(results, regex)
    readable = [r.path for r in results if r.inventory is not None]
    if as_json:
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


def _runtime_reader() -> Callable[[str], Inventory]:
    """--via-runtime: each image started with apptainer/singularity (never cached); an overlay is refused."""
    from envbuild.host.runtime import require_runtime
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

    return overlaid_inventory(path, inventory, sif_image_id(path), mounted)
