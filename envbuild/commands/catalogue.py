"""`envbuild catalogue`: a static page (and its JSON) of what images hold, read from the files as `packages`
and `inspect` read them, with the same remembered inventories."""

from __future__ import annotations

from typing import TYPE_CHECKING

from envbuild.shared.errors import EXIT_CLEAN, EXIT_PROBLEMS, UsageError
from envbuild.shared.terminaltext import printable, printable_lines

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path
    from typing import TextIO

    from envbuild.shared.errors import ImageFormatError


def write_catalogue(images: Sequence[str], output: Path, *, title: str, no_cache: bool, out: TextIO,
                    err: TextIO) -> int:
    """OUTPUT/index.html and OUTPUT/catalogue.json for IMAGES (files, or directories holding them); what was
    written on `out`, what could not be read on `err`; EXIT_PROBLEMS when an image or a path could not be read
    (the page shows the others)."""
    import datetime

    from envbuild import __version__
    from envbuild.catalogue.cataloguedata import build_catalogue
    from envbuild.catalogue.site import expand_images, read_entries, write_site
    from envbuild.inventory.inventorycache import InventoryCache

    paths, problems = expand_images(images)
    for problem in problems:
        err.write(printable(f"error: {problem}") + "\n")
    if not paths:
        raise UsageError("no images to put in the catalogue", "give .sif or .sqsh files, or directories that hold them")

    def report(exc: ImageFormatError) -> None:
        err.write(printable_lines(exc.render()) + "\n")

    entries = read_entries(paths, InventoryCache(enabled=not no_cache).facts, report)
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    catalogue = build_catalogue(entries, generated_at=now, envbuild_version=__version__, title=title)
    page, data = write_site(output, catalogue)
    count = len(catalogue.images)
    images_word = f"image{'s' if count != 1 else ''}"
    out.write(f"wrote {page} and {data}: {count} {images_word}, {len(catalogue.packages)} packages\n")
    if catalogue.failed:
        err.write(f"{catalogue.failed} of {count} {images_word} could not be read (marked on the page)\n")
    return EXIT_PROBLEMS if catalogue.failed or problems else EXIT_CLEAN
