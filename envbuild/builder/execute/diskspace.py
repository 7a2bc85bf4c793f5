"""A full file system, said clearly: which one (mount point and type), how much room it has, and about how
much the failing step needed, instead of a tool's "No space left on device" deep in a log.

Two uses: the executor turns ENOSPC (from its own writes, or in a tool's output) into a `DiskFull` error,
and it checks before copying a finished image to the output that the output's file system can take it,
so a full project directory costs a clear message, not a half-written copy.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable

from envbuild.shared.errors import EnvbuildError

# Tools say it in these words (cp, mksquashfs, tar, uv, pip: "No space left on device (os error 28)";
# Python: "[Errno 28] No space left on device"); quota limits read "Disk quota exceeded" (EDQUOT).
_FULL_TEXT = re.compile(r"No space left on device|Disk quota exceeded", re.IGNORECASE)


class DiskFull(EnvbuildError):
    """A step ran out of space (or quota) on a file system. `refresh()` measures the free space again
    (after the step's cleanup removed its partial files, which is what the user can work with)."""

    where: tuple[str, str, int | None, str, bool] = ("", "", None, "", False)

    def refresh(self) -> None:
        fresh = disk_full_error(*self.where[:4], before=self.where[4])
        self.message, self.hint = fresh.message, fresh.hint
        self.args = fresh.args


def says_disk_full(text: str) -> bool:
    return bool(_FULL_TEXT.search(text))


def existing_ancestor(path: str) -> str:
    """`path` or its nearest existing parent (the file system it is or would be on)."""
    path = os.path.abspath(path)
    while not os.path.exists(path) and path != os.path.dirname(path):
        path = os.path.dirname(path)
    return path


def mount_of(path: str) -> tuple[str, str]:
    """(mount point, file system type) that `path` is on, from /proc/self/mountinfo; ("?", "?") elsewhere."""
    target = os.path.realpath(existing_ancestor(path))
    best = ("?", "?")
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                fields = line.split()
                if " - " not in line or len(fields) < 5:
                    continue
                mount_point = fields[4].replace("\\040", " ")
                fstype = line.split(" - ", 1)[1].split()[0]
                inside = target == mount_point or target.startswith(mount_point.rstrip("/") + "/")
                if inside and len(mount_point) >= len(best[0] if best[0] != "?" else ""):
                    best = (mount_point, fstype)
    except OSError:
        pass
    return best


def free_and_total(path: str) -> tuple[int, int]:
    """Bytes free for an unprivileged user, and the file system's size."""
    info = os.statvfs(existing_ancestor(path))
    return info.f_bavail * info.f_frsize, info.f_blocks * info.f_frsize


def tree_size(path: str) -> int:
    """Bytes the files under `path` take (a file: its size); hard-linked files count once."""
    if os.path.isfile(path):
        return os.path.getsize(path)
    seen: set[tuple[int, int]] = set()
    total = 0
    for directory, _dirs, files in os.walk(path):
        for name in files:
            try:
                info = os.lstat(os.path.join(directory, name))
            except OSError:
                continue
            if (info.st_dev, info.st_ino) not in seen:
                seen.add((info.st_dev, info.st_ino))
                total += info.st_blocks * 512
    return total


def human(size: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit in ("B", "KB") else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TB"  # pragma: no cover - the loop returns at GB


def fullest(paths: Iterable[str]) -> str | None:
    """Of the file systems these paths are on, the path on the one with the least free space."""
    candidates = []
    for index, path in enumerate(paths):
        if not path.startswith("/"):
            continue
        try:
            candidates.append((free_and_total(path)[0], -index, path))
        except OSError:
            continue
    # Of paths on the same file system, the last named: a step's destination comes after its sources.
    return min(candidates)[2] if candidates else None


def disk_full_error(step: str, path: str, needed: int | None, basis: str = "", *, before: bool = False) -> DiskFull:
    """The error for `step` running out of room at `path`; `needed`: about how much the step writes."""
    mount_point, fstype = mount_of(path)
    try:
        free, total = free_and_total(path)
        room = f"{human(free)} free of {human(total)}"
    except OSError:
        room = "free space unknown"
    need = f"; it needs about {human(needed)}" + (f" ({basis})" if basis else "") if needed else ""
    what = "does not have room for" if before else "ran out of space in"
    error = DiskFull(
        f"step {step!r} {what} {path}: the file system mounted at {mount_point} ({fstype}, {room}){need}",
        f"free space on {mount_point} (`envbuild cache prune --max-size 20G` for the store), or point "
        f"--cache-dir / $ENVBUILD_CACHE_DIR and -o at a file system with room (a project or scratch directory, "
        f"not a small home or /tmp). Nothing half-written was kept; the next build reuses the finished layers.",
    )
    error.where = (step, path, needed, basis, before)
    return error


def step_paths(actions: Iterable[object]) -> list[str]:
    """Host paths a step's actions name (arguments, sources, destinations): where a write may have failed."""
    paths: list[str] = []
    for action in actions:
        values = list(getattr(action, "argv", ()) or ()) if not callable(getattr(action, "argv", None)) else []
        values += [v for v in vars(action).values() if isinstance(v, str)] if hasattr(action, "__dict__") else []
        for value in values:
            for part in str(value).split(":"):
                if part.startswith("/") and part not in paths:
                    paths.append(part)
    return paths


def step_need(actions: Iterable[object]) -> tuple[int | None, str]:
    """About how many bytes a step writes, where its actions say: what it copies, or for mksquashfs the
    sandbox it squashes (an upper bound: compression only shrinks it)."""
    from envbuild.builder.plan.actions import CopyFile, CopyTree, Run

    total, basis = 0, []
    for action in actions:
        source = None
        if isinstance(action, (CopyFile, CopyTree)) and not getattr(action, "hardlink", False):
            source, why = action.src, f"the copy of {action.src}"
        elif isinstance(action, Run) and any(os.path.basename(a) == "mksquashfs" for a in action.argv[:3]):
            position = [os.path.basename(a) for a in action.argv].index("mksquashfs")
            source, why = action.argv[position + 1], f"at most the size of {action.argv[position + 1]}"
        if source and os.path.exists(source):
            total += tree_size(source)
            basis.append(why)
    return (total or None), "; ".join(basis)
