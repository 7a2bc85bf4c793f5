"""`envbuild packages`, `envbuild diff`, `envbuild inspect`, `envbuild catalogue`: what is inside images, read from
the files. The options and the output; the work is in envbuild.commands.packages, .inspect and .catalogue."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from envbuild.cli.common import exit_with, reports_errors
from envbuild.cli.options import JSON, OUTPUT, OVERLAY, click_option

# Each command imports its module when it runs: `packages` is meant to answer in a fraction of the time a
# container takes to start, so its start-up carries nothing of diff, inspect or catalogue.

_NO_CACHE_HELP = "read the images again instead of using the index cache (your own: ~/.cache/envrun/inventory-*)"


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
    from envbuild.commands.packages import list_packages

    exit_with(list_packages(images, pattern=pattern, as_json=as_json, as_matrix=as_matrix, overlays=overlays,
                            no_cache=no_cache, via_runtime=via_runtime, out=sys.stdout, err=sys.stderr))


@click.command("diff")
@click.argument("image_a")
@click.argument("image_b")
@click_option(JSON, "as_json")
@click.option("--no-cache", is_flag=True, help=_NO_CACHE_HELP)
@reports_errors
def diff_command(image_a: str, image_b: str, as_json: bool, no_cache: bool) -> None:
    """What changed from IMAGE_A to IMAGE_B (images or venv overlays): packages per environment,
    environment variables, labels, and what overlays were made for (base, Python, mount)."""
    from envbuild.commands.inspect import compare_images

    click.echo(compare_images(image_a, image_b, as_json=as_json, no_cache=no_cache), nl=False)


@click.command("inspect")
@click.argument("image")
@click_option(JSON, "as_json")
@click.option("--no-cache", is_flag=True, help=_NO_CACHE_HELP)
@reports_errors
def inspect_command(image: str, as_json: bool, no_cache: bool) -> None:
    """Labels, start scripts, runscript, embedded envbuild spec and lock, partitions, compression, sizes
    and Python environments of IMAGE, read from the file. For a venv overlay (.sqsh): its record (the base
    and Python it was made for, mount point, packages added and kept), squashfs facts, spec and lock."""
    from envbuild.commands.inspect import inspect_image

    click.echo(inspect_image(image, as_json=as_json, no_cache=no_cache, err=sys.stderr), nl=False)


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
    from envbuild.commands.catalogue import write_catalogue

    exit_with(write_catalogue(images, output, title=title, no_cache=no_cache, out=sys.stdout, err=sys.stderr))
