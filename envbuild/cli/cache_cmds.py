"""`envbuild cache ls|prune|rm|dir|verify`: look at, clean up and check the build store (bases, envs, images,
scratch). The options and the output; the work is in envbuild.commands.cache."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from envbuild.cli.common import exit_with, reports_errors
from envbuild.cli.options import CACHE_DIR, DRY_RUN, JSON, click_option
from envbuild.commands import cache
from envbuild.shared.errors import UsageError, exit_status_help

F = TypeVar("F", bound=Callable[..., Any])


def _cache_dir_option(func: F) -> F:
    return click_option(CACHE_DIR, type=click.Path(file_okay=False, path_type=Path))(func)


@click.group("cache", epilog="\b\n" + exit_status_help("an entry could not be removed, or (verify) does not match "
                                                           "its record"))
def cache_group() -> None:
    """Look at and clean up envbuild's build store: cached bases, environments, images, build scratch."""


@cache_group.command("dir")
@_cache_dir_option
@reports_errors
def dir_command(cache_dir: Path | None) -> None:
    """Print the store's directory."""
    click.echo(str(cache.store_root(cache_dir)))


@cache_group.command("ls")
@click_option(JSON, "as_json", note='a list of {"kind", "name", "path", "complete", "created", "last_used", "size_bytes", '
              '"description", "meta"}')
@_cache_dir_option
@reports_errors
def ls_command(as_json: bool, cache_dir: Path | None) -> None:
    """List the store's entries with their size and last use."""
    click.echo(cache.list_store(cache.store_root(cache_dir), as_json=as_json), nl=False)


@cache_group.command("prune")
@click.option("--older-than", metavar="DURATION",
              help="also remove entries last used longer ago than DURATION (e.g. 30d, 12h, 2w; the unit is required)")
@click.option("--max-size", metavar="SIZE",
              help="then remove the least recently used entries until the store is under SIZE (e.g. 50G, 1.5T)")
@click.option("--downloads", is_flag=True,
              help="include the uv/pip download caches (alone: empty them; with --older-than/--max-size: by the same rules)")
@click_option(DRY_RUN, note="it prints what would be removed")
@_cache_dir_option
@reports_errors
def prune_command(older_than: str | None, max_size: str | None, downloads: bool, dry_run: bool, cache_dir: Path | None) -> None:
    """Remove what is no longer needed. Without options: only what killed builds left behind (unfinished
    entries and build scratch that no running build holds, at once; kept work directories after an
    hour). Entries a running build uses are skipped."""
    exit_with(cache.prune_store(cache.store_root(cache_dir), older_than=older_than, max_size=max_size,
                                 downloads=downloads, dry_run=dry_run, out=sys.stdout, err=sys.stderr))


@cache_group.command("rm")
@click.argument("names", nargs=-1, metavar="NAME...")
@click.option("--all", "remove_everything", is_flag=True, help="remove every entry `envbuild cache ls` lists, download caches included")
@_cache_dir_option
@reports_errors
def rm_command(names: tuple[str, ...], remove_everything: bool, cache_dir: Path | None) -> None:
    """Remove entries by NAME (as `envbuild cache ls` shows it, or a unique prefix; KIND/NAME when a name
    is in more than one kind). Exit 1 when any could not be removed."""
    if remove_everything and names:
        raise UsageError("give entry names or --all, not both", "`envbuild cache rm --all` empties the whole store")
    if not remove_everything and not names:
        raise UsageError("no entry named", "name entries as `envbuild cache ls` shows them, or give --all")
    exit_with(cache.remove_from_store(cache.store_root(cache_dir), names, everything=remove_everything,
                                       out=sys.stdout, err=sys.stderr))


@cache_group.command("verify")
@click_option(JSON, "as_json", note='{"store", "summary": {STATUS: count}, "entries": [{"kind", "name", "path", '
              '"status", "details"}]}')
@_cache_dir_option
@reports_errors
def verify_command(as_json: bool, cache_dir: Path | None) -> None:
    """Check every entry of the store against its content record: each stored image and overlay is hashed,
    each base's and env layer's root file system digested again. Exit 1 when any entry does not match, or
    has no record where someone else could have written it (unverifiable, docs/concepts/trust.md); entries
    without a record in a store only you can write (made by an older envbuild) are listed, not counted as failures."""
    exit_with(cache.verify_store(cache.store_root(cache_dir), as_json=as_json, out=sys.stdout, err=sys.stderr))
