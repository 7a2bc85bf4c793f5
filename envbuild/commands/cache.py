"""`envbuild cache dir|ls|prune|rm|verify`: the build store's entries listed, chosen, removed and checked
against their content records (envbuild.store), each command's report written to the output it is given."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING

from envbuild.shared.durations import parse_duration
from envbuild.shared.errors import EXIT_CLEAN, EXIT_PROBLEMS, EnvbuildError, UsageError
from envbuild.store.debris import abandoned
from envbuild.store.entries import StoreEntry, entry_to_dict, human_age, human_size, list_entries, parse_size
from envbuild.store.layout import ENTRY_DIRS, KIND_ORDER
from envbuild.store.prune import EntryBusyError, choose_prunable, remove_entry

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path
    from typing import TextIO


def store_root(cache_dir: Path | None) -> Path:
    """The store the command works on: --cache-dir, else $ENVBUILD_CACHE_DIR or the user's cache."""
    from envbuild.host.runtime import default_cache_dir

    return (cache_dir or default_cache_dir()).expanduser().absolute()


def list_store(root: Path, *, as_json: bool) -> str:
    """`envbuild cache ls`: the entries with their size and last use, and what `prune` would free; or as JSON."""
    entries = list_entries(root)
    if as_json:
        return json.dumps([entry_to_dict(e) for e in entries], indent=2) + "\n"
    if not entries:
        return f"the store {root} is empty\n"
    now = time.time()
    total = sum(e.size_bytes for e in entries)
    reclaimable = sum(e.size_bytes for e in choose_prunable(entries, now=now, older_than=None, max_size=None,
                                                            abandoned=abandoned(root, entries)))
    line = f"total {human_size(total)} in {_entries(len(entries))} under {root}"
    if reclaimable:
        line += f"; `envbuild cache prune` frees {human_size(reclaimable)} left by killed builds"
    return render_entry_table(entries, now) + line + "\n"


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


def prune_store(root: Path, *, older_than: str | None, max_size: str | None, downloads: bool, dry_run: bool,
                out: TextIO, err: TextIO) -> int:
    """`envbuild cache prune`: remove (or with dry_run, list) what the rules choose; the exit status."""
    age = None if older_than is None else parse_duration(older_than, "--older-than", bare=None, allow_zero=True)
    size = parse_size(max_size) if max_size is not None else None
    now = time.time()
    entries = list_entries(root)
    chosen = choose_prunable(entries, now=now, older_than=age, max_size=size, include_downloads=downloads,
                             abandoned=abandoned(root, entries))
    if not chosen:
        out.write("nothing to prune\n")
        return EXIT_CLEAN
    if dry_run:
        for entry in chosen:
            out.write(f"would remove {_describe_removal(entry, now)}\n")
        out.write(f"would free {human_size(sum(e.size_bytes for e in chosen))}\n")
        return EXIT_CLEAN
    return _remove_all(root, chosen, now, busy_is_failure=False, out=out, err=err)


def remove_from_store(root: Path, names: Sequence[str], *, everything: bool, out: TextIO, err: TextIO) -> int:
    """`envbuild cache rm`: the entries NAMES mean (every one with `everything`) removed; the exit status."""
    entries = list_entries(root)
    chosen = entries if everything else resolve_entry_names(entries, names)
    if not chosen:
        out.write(f"the store {root} is empty\n")
        return EXIT_CLEAN
    return _remove_all(root, chosen, time.time(), busy_is_failure=True, out=out, err=err)


def verify_store(root: Path, *, as_json: bool, out: TextIO, err: TextIO) -> int:
    """`envbuild cache verify`: every complete entry against its content record, one line each as it is checked,
    then the counts (or all of it as JSON); the exit status."""
    from envbuild.store.integrity import FAILURES, STATUSES, verify_entries

    checks = []
    for check in verify_entries(root):
        checks.append(check)
        if not as_json:
            out.write(f"{check.status.upper() if check.status in FAILURES else check.status:<10}  "
                      f"{check.qualified_name}  {'; '.join(check.details)}\n")
    counts = {status: sum(1 for c in checks if c.status == status) for status in STATUSES}
    if as_json:
        out.write(json.dumps({"store": str(root), "summary": counts,
                              "entries": [{"kind": c.kind, "name": c.name, "path": c.path, "status": c.status,
                                           "details": list(c.details)} for c in checks]}, indent=2) + "\n")
    elif not checks:
        out.write(f"the store {root} holds no complete entry\n")
    else:
        out.write(f"{_entries(len(checks))} under {root}: "
                  + ", ".join(f"{n} {status}" for status, n in counts.items() if n or status in ("ok", "mismatch")) + "\n")
    failed = sum(counts[status] for status in FAILURES)
    if not failed:
        return EXIT_CLEAN
    if not as_json:
        err.write(_verify_failure(root, counts, failed) + "\n")
    return EXIT_PROBLEMS


def _verify_failure(root: Path, counts: dict[str, int], failed: int) -> str:
    """The error that ends a failed verify: what is wrong with how many entries, and what to do."""
    from envbuild.store.integrity import MISMATCH, UNVERIFIABLE

    many = failed != 1
    them, they = ("them", "they") if many else ("it", "it")
    if not counts[UNVERIFIABLE]:
        reason = "do not match their content record" if many else "does not match its content record"
    elif not counts[MISMATCH]:
        reason = ("have no content record where others could have written them: they cannot be verified" if many
                  else "has no content record where others could have written it: it cannot be verified")
    else:
        reason = "do not match their content record or cannot be verified"
    return (f"error: {failed} entr{'ies' if many else 'y'} of {root} {reason}\n  fix: remove {them} "
            f"(`envbuild cache rm --cache-dir {root} KIND/NAME`) and find out who changed or made {them}: "
            f"whoever can write the store can change what its users build and run; {they} will be built again")


def resolve_entry_names(entries: list[StoreEntry], names: Sequence[str]) -> list[StoreEntry]:
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


def _remove_all(root: Path, entries: list[StoreEntry], now: float, *, busy_is_failure: bool, out: TextIO,
                err: TextIO) -> int:
    """Remove each entry, going on past failures, then say what was freed; EXIT_PROBLEMS when any failed."""
    freed = 0
    failed = 0
    for entry in entries:
        try:
            remove_entry(root, entry, only_if_unfinished=_unfinished(entry))
        except EntryBusyError as exc:
            if busy_is_failure:
                err.write(exc.render() + "\n")
                failed += 1
            else:
                err.write(f"note: skipped {exc.message}\n")
            continue
        except EnvbuildError as exc:
            err.write(exc.render() + "\n")
            failed += 1
            continue
        out.write(f"removed {_describe_removal(entry, now)}\n")
        freed += entry.size_bytes
    out.write(f"freed {human_size(freed)}\n")
    return EXIT_PROBLEMS if failed else EXIT_CLEAN


def _unfinished(entry: StoreEntry) -> bool:
    """A base, env or image a killed build left without its complete marker (work and trash say so already)."""
    return not entry.complete and entry.kind in ENTRY_DIRS


def _describe_removal(entry: StoreEntry, now: float) -> str:
    state = "unfinished, " if _unfinished(entry) else ""
    return f"{entry.kind} {entry.name} ({state}{human_size(entry.size_bytes)}, last used {human_age(entry.last_used, now)})"


def _entries(count: int) -> str:
    return f"{count} entr{'ies' if count != 1 else 'y'}"
