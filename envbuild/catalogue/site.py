"""The file-system side of `envbuild catalogue`: which files IMAGES name, reading each (an unreadable one
becomes a marked entry, never the end of the run), and writing the page and its JSON."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path

from envbuild.catalogue.cataloguedata import Catalogue, ImageEntry, render_json
from envbuild.catalogue.page import JSON_NAME, render_page
from envbuild.inventory.imagefacts import ImageFacts
from envbuild.shared.errors import EnvbuildError, ImageFormatError, UsageError
from envbuild.shared.safefiles import open_dir, write_file

IMAGE_SUFFIXES = (".sif", ".sqsh")  # SIF images and venv overlays
PAGE_NAME = "index.html"


def is_sandbox(path: str) -> bool:
    """A directory that is an image itself (apptainer's sandbox), not a directory of images."""
    return os.path.isdir(os.path.join(path, ".singularity.d"))


def expand_images(arguments: Sequence[str]) -> tuple[list[str], list[str]]:
    """(image paths, problems). A directory stands for the .sif and .sqsh files directly in it, sorted by
    name; a sandbox directory and any other path stand for themselves (a missing file is reported when
    read). Each path once, in the order given."""
    images: list[str] = []
    problems: list[str] = []
    for argument in arguments:
        if os.path.isdir(argument) and not is_sandbox(argument):
            try:
                names = sorted(os.listdir(argument))
            except OSError as exc:
                problems.append(f"{argument}: cannot list the directory: {exc.strerror or exc}")
                continue
            found = [os.path.join(argument, n) for n in names
                     if n.endswith(IMAGE_SUFFIXES) and os.path.isfile(os.path.join(argument, n))]
            if not found:
                problems.append(f"{argument}: no {' or '.join(IMAGE_SUFFIXES)} files in this directory")
            images += found
        else:
            images.append(argument)
    unique = list(dict.fromkeys(os.path.normpath(path) for path in images))
    return unique, problems


def read_entries(paths: Sequence[str], read: Callable[[str], ImageFacts],
                 report: Callable[[ImageFormatError], None]) -> list[ImageEntry]:
    """Each image's facts through `read`; one that cannot be read is reported and kept as an error entry."""
    entries = []
    for path in paths:
        try:
            entries.append(ImageEntry(path, facts=read(path)))
        except ImageFormatError as exc:
            report(exc)
            entries.append(ImageEntry(path, error=exc.reason + (f" (fix: {exc.hint})" if exc.hint else "")))
    return entries


def write_site(directory: Path, catalogue: Catalogue) -> tuple[Path, Path]:
    """Write DIRECTORY/index.html and DIRECTORY/catalogue.json (each replaced whole, never half written)."""
    if directory.exists() and not directory.is_dir():
        raise UsageError(f"-o {directory}: is a file, not a directory", "give a directory for the page, e.g. -o site/")
    try:
        fd = open_dir(directory, create=True)  # each file written through it: a link at a name is replaced
        try:
            write_file(JSON_NAME, render_json(catalogue), dir_fd=fd)
            write_file(PAGE_NAME, render_page(catalogue), dir_fd=fd)
        finally:
            os.close(fd)
        page, data = directory / PAGE_NAME, directory / JSON_NAME
    except OSError as exc:
        raise EnvbuildError(f"-o {directory}: cannot write the catalogue: {exc.strerror or exc}",
                         "give a directory you can write to") from None
    return page, data
