"""`envbuild packages`, `envbuild diff`, `envbuild inspect`, `envbuild catalogue`: what is inside images, read from
the files."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from envbuild.cli.common import reports_errors
from envbuild.cli.options import JSON, OUTPUT, OVERLAY, click_option
from envbuild.host.runtime import require_runtime
from envbuild.inventory.image import image_arch, read_inventory, sif_image_id
from envbuild.inventory.inventorycache import InventoryCache
from envbuild.inventory.listing import ImageResult, package_rows, render_json, render_matrix, render_table
from envbuild.inventory.overlayfile import is_overlay_file
from envbuild.inventory.pyenvs import Inventory
from envbuild.shared.errors import ImageFormatError, UsageError
from envbuild.shared.terminaltext import printable, printable_lines

if TYPE_CHECKING:
    from envbuild.inventory.imagefacts import ImageFacts

# diff, inspect, catalogue and --via-runtime import their modules when used: `packages` is meant to answer in a
# fraction of the time a container takes to start, so its start-up stays small.

_NO_CACHE_HELP = "read the images again instead of using the index cache (your own: ~/.cache/envrun/inventory-*)"


def _cache(no_cache: bool) -> InventoryCache:
    return InventoryCache(enabled=not no_cache)


def _inventory(path: str, cache: InventoryCache) -> Inventory:
    inventory = cache.load(path)
    if inventory is None:
        inventory = read_inventory(path)
        cache.store(path, inventory)
    return inventory


def _warn_problems(path: str, inventory: Inventory) -> None:
    for problem in inventory.problems:  # paths and messages name what is in the image: shown escaped
        click.echo(printable(f"warning: {path}: {problem.path}: {problem.message}"), err=True)


def _report(exc: ImageFormatError) -> None:
    click.echo(printable_lines(exc.render()), err=True)


@click.command("packages")
@click.argument("images", nargs=-1, required=True)
@click.option("--grep", "pattern", metavar="REGEX", help="only packages whose name matches (Python regex, case-insensitive)")
@click_option(JSON, "as_json", note="instead of the table")
@click.option("--matrix", "as_matrix", is_flag=True, help="one row per package, one column per image, versions in the cells")
@click_option(OVERLAY, "overlays", multiple=True, note="on each image; lists the combination: the overlay's venv as its "
              "Python sees it, inherited packages marked 'pip (base PREFIX)'")
@click.option("--no-cache", is_flag=True, help=_NO_CACHE_HELP)
@click.option("--via-runtime", is_flag=True, help="start each image with apptainer/singularity instead of reading the file "
                                                   "(for encrypted images; slower; never cached)")
@reports_errors
def packages_command(images: tuple[str, ...], pattern: str | None, as_json: bool, as_matrix: bool,
                     overlays: tuple[str, ...], no_cache: bool, via_runtime: bool) -> None:
    """List the Python packages (pip and conda) in every environment of IMAGES (.sif files, sandbox
    directories or venv overlays .sqsh), without starting containers. Exit 1 when an image could not be
    read; the others are listed."""
    try:
        regex = re.compile(pattern, re.IGNORECASE) if pattern else None
    except re.error as exc:
        raise UsageError(f"--grep {pattern!r} is not a valid regular expression: {exc}",
                         "use Python regex syntax, e.g. --grep '^torch' or --grep 'lightning|transformers'") from None
    if overlays and via_runtime:
        raise UsageError("--overlay combines files read here; --via-runtime starts each image instead",
                         "leave out --via-runtime (overlays are never encrypted), or list the base alone with it")
    cache = _cache(no_cache or via_runtime)
    runtime = require_runtime() if via_runtime else None
    if runtime:
        from envbuild.inventory.via_runtime import read_inventory_via_runtime
    mounted = _overlay_inventories(overlays, cache)
    results = []
    for path in images:
        label = _combined(path, overlays)
        try:
            if runtime and is_overlay_file(path):
                raise ImageFormatError(path, "is a venv overlay: it is read from the file, not started",
                                       "list it without --via-runtime")
            inventory = read_inventory_via_runtime(path, runtime.path) if runtime else _inventory(path, cache)
            if mounted:
                inventory = _overlaid(path, inventory, mounted)
        except ImageFormatError as exc:
            _report(exc)
            results.append(ImageResult(label, error=exc.message))
            continue
        _warn_problems(label, inventory)
        results.append(ImageResult(label, inventory, arch=image_arch(path)))
    rows = package_rows(results, regex)
    readable = [r.path for r in results if r.inventory is not None]
    if as_json:
        click.echo(render_json(results, rows, with_matrix=as_matrix), nl=False)
    elif as_matrix:
        click.echo(render_matrix(rows, readable), nl=False)
    else:
        click.echo(render_table(rows), nl=False)
    failed = len(results) - len(readable)
    if failed:
        click.echo(f"{failed} of {len(results)} image{'s' if len(results) != 1 else ''} could not be read", err=True)
        sys.exit(1)


def _overlay_inventories(overlays: tuple[str, ...], cache: InventoryCache) -> list[tuple[str, Inventory]]:
    """Each --overlay's inventory, read once for all images; a file that is no overlay stops the command."""
    if not overlays:
        return []
    from envbuild.inventory.combine import require_overlay

    mounted = [(path, _inventory(path, cache)) for path in overlays]
    for path, inventory in mounted:
        require_overlay(path, inventory)
    return mounted


def _combined(path: str, overlays: tuple[str, ...]) -> str:
    if not overlays:
        return path
    from envbuild.inventory.combine import combined_label

    return combined_label(path, list(overlays))


def _overlaid(path: str, inventory: Inventory, mounted: list[tuple[str, Inventory]]) -> Inventory:
    from envbuild.inventory.combine import overlaid_inventory

    return overlaid_inventory(path, inventory, sif_image_id(path), mounted)


def _facts(path: str, cache: InventoryCache) -> ImageFacts:
    from envbuild.inventory.imagefacts import read_image_facts

    facts = read_image_facts(path, cache.load(path))
    cache.store(path, facts.inventory)
    return facts


@click.command("diff")
@click.argument("image_a")
@click.argument("image_b")
@click_option(JSON, "as_json")
@click.option("--no-cache", is_flag=True, help=_NO_CACHE_HELP)
@reports_errors
def diff_command(image_a: str, image_b: str, as_json: bool, no_cache: bool) -> None:
    """What changed from IMAGE_A to IMAGE_B (images or venv overlays): packages per environment,
    environment variables, labels, and what overlays were made for (base, Python, mount)."""
    from envbuild.inventory.diff import diff_images, diff_to_dict, render_diff

    cache = _cache(no_cache)
    result = diff_images(_facts(image_a, cache), _facts(image_b, cache))
    if as_json:
        click.echo(json.dumps(diff_to_dict(result), indent=2))
    else:
        click.echo(render_diff(result), nl=False)


@click.command("inspect")
@click.argument("image")
@click_option(JSON, "as_json")
@click.option("--no-cache", is_flag=True, help=_NO_CACHE_HELP)
@reports_errors
def inspect_command(image: str, as_json: bool, no_cache: bool) -> None:
    """Labels, start scripts, runscript, embedded envbuild spec and lock, partitions, compression, sizes
    and Python environments of IMAGE, read from the file. For a venv overlay (.sqsh): its record (the base
    and Python it was made for, mount point, packages added and kept), squashfs facts, spec and lock."""
    from envbuild.inventory.inspect_report import inspect_to_dict, render_inspect

    facts = _facts(image, _cache(no_cache))
    _warn_problems(image, facts.inventory)
    if as_json:
        click.echo(json.dumps(inspect_to_dict(facts), indent=2))
    else:
        click.echo(render_inspect(facts), nl=False)


@click.command("catalogue")
@click.argument("images", nargs=-1, required=True)
@click_option(OUTPUT, required=True, type=click.Path(path_type=Path), metavar="DIR",
              note="a directory: index.html and catalogue.json go into it (created when missing)")
@click.option("--title", default="Image catalogue", show_default=True, help="the page's heading")
@click.option("--no-cache", is_flag=True, help=_NO_CACHE_HELP)
@reports_errors
def catalogue_command(images: tuple[str, ...], output: Path, title: str, no_cache: bool) -> None:
    """Write a static page of what IMAGES hold: OUTPUT/index.html (no server, nothing external) and the
    same data as OUTPUT/catalogue.json. IMAGES are .sif files, venv overlays (.sqsh), sandbox directories,
    or directories holding .sif/.sqsh files. Per image: size, compression and which runtimes can run it,
    base, build record, labels, Python environments; then packages x images with the versions that differ
    marked, and a search box (also as index.html?q=torch). Read from the files, as `packages` does, with
    its cache. Exit 1 when an image could not be read; the page shows it and all the others."""
    import datetime

    from envbuild import __version__
    from envbuild.catalogue.cataloguedata import build_catalogue
    from envbuild.catalogue.site import expand_images, read_entries, write_site

    paths, problems = expand_images(images)
    for problem in problems:
        click.echo(printable(f"error: {problem}"), err=True)
    if not paths:
        raise UsageError("no images to put in the catalogue", "give .sif or .sqsh files, or directories that hold them")
    cache = _cache(no_cache)
    entries = read_entries(paths, lambda path: _facts(path, cache), _report)
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    catalogue = build_catalogue(entries, generated_at=now, envbuild_version=__version__, title=title)
    page, data = write_site(output, catalogue)
    count = len(catalogue.images)
    click.echo(f"wrote {page} and {data}: {count} image{'s' if count != 1 else ''}, {len(catalogue.packages)} packages")
    if catalogue.failed:
        click.echo(f"{catalogue.failed} of {count} image{'s' if count != 1 else ''} could not be read (marked on the page)", err=True)
    if catalogue.failed or problems:
        sys.exit(1)
