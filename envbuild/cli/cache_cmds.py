"""`envbuild cache ls|prune|rm|dir|verify`: look at, clean up and check the build store (bases, envs, images,
scratch)."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from envbuild.cli.common import reports_errors
from envbuild.cli.options import CACHE_DIR, DRY_RUN, JSON, click_option
from envbuild.shared.durations import parse_duration
from envbuild.shared.errors import EXIT_PROBLEMS, EnvbuildError, UsageError, exit_status_help
from envbuild.store.debris import abandoned
from envbuild.store.entries import StoreEntry, entry_to_dict, human_age, human_size, list_entries, parse_size
from envbuild.store.layout import ENTRY_DIRS, KIND_ORDER
from envbuild.store.prune import EntryBusyError, choose_prunable, remove_entry

F = TypeVar("F", bound=Callable[..., Any])


def _cache_dir_option(func: F) -> F:
    return click_option(CACHE_DIR, type=click.Path(file_okay=False, path_type=Path))(func)


def _store_root(cache_dir: Path | None) -> Path:
    from envbuild.host.runtime import default_cache_dir

    return (cache_dir or default_cache_dir()).expanduser().absolute()


@click.group("cache", epilog="\b\n" + exit_status_help("an entry could not be removed, or (verify) does not match "
                                                           "its record"))
def cache_group() -> None:
    """Look at and clean up envbuild's build store: cached bases, environments, images, build scratch."""


@cache_group.command("dir")
@_cache_dir_option
@reports_errors
def dir_command(cache_dir: Path | None) -> None:
    """Print the store's directory."""
    click.echo(str(_store_root(cache_dir)))


@cache_group.command("ls")
@click_option(JSON, "as_json", note='a list of {"kind", "name", "path", "complete", "created", "last_used", "size_bytes", '
              '"description", "meta"}')
@_cache_dir_option
@reports_errors
def ls_command(as_json: bool, cache_dir: Path | None) -> None:
    """List the store's entries with their size and last use."""
    root = _store_root(cache_dir)
    entries = list_entries(root)
    if as_json:
        click.echo(json.dumps([entry_to_dict(e) for e in entries], indent=2))
        return
    if not entries:
        click.echo(f"the store {root} is empty")
        return
    now = time.time()
    click.echo(render_entry_table(entries, now), nl=False)
    total = sum(e.size_bytes for e in entries)
    reclaimable = sum(e.size_bytes for e in choose_prunable(entries, now=now, older_than=None, max_size=None,
                                                            abandoned=abandoned(root, entries)))
    line = f"total {human_size(total)} in {len(entries)} entr{'ies' if len(entries) != 1 else 'y'} under {root}"
    if reclaimable:
        line += f"; `envbuild cache prune` frees {human_size(reclaimable)} left by killed builds"
    click.echo(line)


def render_entry_table(entries: list[StoreEntry], now: float) -> str:
    """KIND NAME SIZE LAST-USED DESCRIPTION, one line per entry, columns aligned."""
    rows = [("KIND", "NAME", "SIZE", "LAST-USED", "DESCRIPTION")]
    for entry in entries:
        description = f"[incomplete] {entry.description}".rstrip() if _unfinished(entry) else entry.description
        rows.append((entry.kind, entry.name, human_size(entry.size_bytes), human_age(entry.last_used, now), description))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = []
    for row in rows:
        cells = [row[0].ljust(widths[0]), row[1].ljust(widths[1]), row[2].rjust(widths[2]), row[3].ljust(widths[3]), row[4]]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines) + "\n"


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
    age = None if older_than is None else parse_duration(older_than, "--older-than", bare=None, allow_zero=True)
    size = parse_size(max_size) if max_size is not None else None
    root = _store_root(cache_dir)
    now = time.time()
    entries = list_entries(root)
    chosen = choose_prunable(entries, now=now, older_than=age, max_size=size, include_downloads=downloads,
                             abandoned=abandoned(root, entries))
    if not chosen:
        click.echo("nothing to prune")
        return
    if dry_run:
        for entry in chosen:
            click.echo(f"would remove {_describe_removal(entry, now)}")
        click.echo(f"would free {human_size(sum(e.size_bytes for e in chosen))}")
        return
    freed, failed = _remove_all(root, chosen, now, busy_is_failure=False)
    click.echo(f"freed {human_size(freed)}")
    if failed:
        sys.exit(EXIT_PROBLEMS)


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
    root = _store_root(cache_dir)
    entries = list_entries(root)
    chosen = entries if remove_everything else resolve_entry_names(entries, names)
    if not chosen:
        click.echo(f"the store {root} is empty")
        return
    freed, failed = _remove_all(root, chosen, time.time(), busy_is_failure=True)
    click.echo(f"freed {human_size(freed)}")
    if failed:
        sys.exit(EXIT_PROBLEMS)


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
    from envbuild.store.integrity import FAILURES, MISMATCH, STATUSES, UNVERIFIABLE, verify_entries

    root = _store_root(cache_dir)
    checks = []
    for check in verify_entries(root):
        checks.append(check)
        if not as_json:
            click.echo(f"{check.status.upper() if check.status in FAILURES else check.status:<10}  "
                       f"{check.qualified_name}  {'; '.join(check.details)}")
    counts = {status: sum(1 for c in checks if c.status == status) for status in STATUSES}
    if as_json:
        click.echo(json.dumps({"store": str(root), "summary": counts,
                               "entries": [{"kind": c.kind, "name": c.name, "path": c.path, "status": c.status,
                                            "details": list(c.details)} for c in checks]}, indent=2))
    elif not checks:
        click.echo(f"the store {root} holds no complete entry")
    else:
        click.echo(f"{len(checks)} entr{'ies' if len(checks) != 1 else 'y'} under {root}: "
                   + ", ".join(f"{n} {status}" for status, n in counts.items() if n or status in ("ok", "mismatch")))
    failed = sum(counts[status] for status in FAILURES)
    if failed:
        if not as_json:
            many = failed != 1
            them, they = ("them", "they") if many else ("it", "it")
            if not counts[UNVERIFIABLE]:
                reason = "do not match their content record" if many else "does not match its content record"
            elif not counts[MISMATCH]:
                reason = ("have no content record where others could have written them: they cannot be verified" if many
                          else "has no content record where others could have written it: it cannot be verified")
            else:
                reason = "do not match their content record or cannot be verified"
            click.echo(f"error: {failed} entr{'ies' if many else 'y'} of {root} {reason}\n  fix: remove {them} "
                       f"(`envbuild cache rm --cache-dir {root} KIND/NAME`) and find out who changed or made {them}: "
                       f"whoever can write the store can change what its users build and run; {they} will be built again",
                       err=True)
        sys.exit(EXIT_PROBLEMS)


def resolve_entry_names(entries: list[StoreEntry], names: tuple[str, ...] | list[str]) -> list[StoreEntry]:
    """The entries NAMES mean, each an exact name, a unique prefix, or KIND/NAME-or-prefix. Every name is
    checked before anything is removed, so a typo removes nothing."""
    chosen: list[StoreEntry] = []
    for name in names:
        entry = _resolve_one(entries, name)
        if entry not in chosen:
            chosen.append(entry)
    return chosen


def _resolve_one(entries: list[StoreEntry], name: str) -> StoreEntry:
    kind, _, rest = name.rpartition("/")
    pool = entries
    if kind:
        if kind not in KIND_ORDER:
            raise UsageError(f"unknown entry kind {kind!r} in {name!r}", f"kinds are: {', '.join(KIND_ORDER)}")
        pool = [e for e in entries if e.kind == kind]
    if not rest:
        raise UsageError(f"empty entry name {name!r}", "name an entry as `envbuild cache ls` shows it")
    for matches in ([e for e in pool if e.name == rest], [e for e in pool if e.name.startswith(rest)]):
        if len(matches) == 1:
            return matches[0]
        if len(matches) > 1:
            raise UsageError(f"{name!r} matches {len(matches)} entries: {_candidates(matches)}",
                             "give more of the name, or KIND/NAME (e.g. env/<name>)")
    if not entries:
        raise UsageError(f"no entry {name!r}: the store is empty", None)
    raise UsageError(f"no entry {name!r} in the store; entries: {_candidates(entries)}",
                     "name an entry as `envbuild cache ls` shows it, or a unique prefix of its name")


def _candidates(entries: list[StoreEntry], limit: int = 20) -> str:
    names = [e.qualified_name for e in entries[:limit]]
    more = len(entries) - limit
    return ", ".join(names) + (f" and {more} more" if more > 0 else "")


def _remove_all(root: Path, entries: list[StoreEntry], now: float, *, busy_is_failure: bool) -> tuple[int, int]:
    """Remove each entry, going on past failures. Returns (bytes freed, number that failed)."""
    freed = 0
    failed = 0
    for entry in entries:
        try:
            remove_entry(root, entry, only_if_unfinished=_unfinished(entry))
        except EntryBusyError as exc:
            if busy_is_failure:
                click.echo(exc.render(), err=True)
                failed += 1
            else:
                click.echo(f"note: skipped {exc.message}", err=True)
            continue
        except EnvbuildError as exc:
            click.echo(exc.render(), err=True)
            failed += 1
            continue
        click.echo(f"removed {_describe_removal(entry, now)}")
        freed += entry.size_bytes
    return freed, failed


def _unfinished(entry: StoreEntry) -> bool:
    """A base, env or image a killed build left without its complete marker (work and trash say so already)."""
    return not entry.complete and entry.kind in ENTRY_DIRS


def _describe_removal(entry: StoreEntry, now: float) -> str:
    state = "unfinished, " if _unfinished(entry) else ""
    return f"{entry.kind} {entry.name} ({state}{human_size(entry.size_bytes)}, last used {human_age(entry.last_used, now)})"
