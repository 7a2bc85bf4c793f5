"""mksquashfs, as a plan writes it: which options each compression name means, which runtimes read the
result, and the whole command line that writes a tree into a SIF's partition or an overlay file. Pure.

Apart from envbuild.sif.writer (the SIF writer, an executor) because `envbuild build` checks --compression
before anything else, and the planners (envbuild.builder.plan.squashplan, envbuild.builder.plan.overlayplan) write the
command without importing an executor.
"""

from __future__ import annotations

from envbuild.host.node import usable_cpus
from envbuild.shared.errors import UsageError
from envbuild.sif.format import PARTITION_OFFSET

# Compressions mksquashfs can write and container runtimes can read, with the mksquashfs options
# used for each, and an optional level ("gzip:6", "zstd:9").
#
# Who can run which (checked in the runtimes' sources, pkg/image/squashfs.go CheckSquashfsHeader,
# which refuses an image whose squashfs uses a compression it does not list):
#   gzip  every apptainer and singularity; the only one that works everywhere.
#   xz    apptainer >= 1.0, singularity >= 3.0 (also SingularityCE): accepted; the mount then
#         needs kernel squashfs xz support (Linux >= 2.6.38, CONFIG_SQUASHFS_XZ) in setuid mode,
#         or a squashfuse built with liblzma in unprivileged (user namespace) mode.
#   lz4   as xz, with kernel >= 3.19 (CONFIG_SQUASHFS_LZ4) or a squashfuse built with liblz4.
#   zstd  apptainer >= 1.4.0 only (2025-03; before it: "corrupted image: unknown compression
#         algorithm value 6"). No SingularityCE release accepts it (4.5.1, 2026-08, lists gzip,
#         lzma, lzo, xz, lz4). Mounting needs kernel >= 4.14 (CONFIG_SQUASHFS_ZSTD) or a squashfuse
#         built with libzstd (apptainer's own packages bundle one since 1.4.0).
# mksquashfs's defaults: gzip level 9 (what apptainer build writes), zstd level 15 (slow: level 3 is
# many times faster for a slightly larger image with mksquashfs 4.5.1).
COMPRESSIONS: dict[str, tuple[str, ...]] = {
    "gzip": ("-comp", "gzip"),
    "zstd": ("-comp", "zstd", "-Xcompression-level", "3"),
    "lz4": ("-comp", "lz4"),
    "xz": ("-comp", "xz"),
}
# What a build writes unless --compression says otherwise (gzip: every runtime reads it); one home for the default.
DEFAULT_COMPRESSION = "gzip:6"
_LEVELS = {"gzip": range(1, 10), "zstd": range(1, 23)}  # what mksquashfs accepts for -Xcompression-level
_NOT_EVERYWHERE = {
    "xz": "xz images need apptainer >= 1.0 or singularity >= 3.0 and kernel/squashfuse xz support",
    "lz4": "lz4 images need apptainer >= 1.0 or singularity >= 3.0 and kernel (>= 3.19) or squashfuse lz4 support",
    "zstd": "zstd images run only on apptainer >= 1.4.0 (no SingularityCE release reads them)",
}

def check_compression(name: str) -> tuple[str, ...]:
    """The mksquashfs options for compression `name` ("gzip", "zstd", "lz4", "xz", or "gzip:6",
    "zstd:9" with a level); a UsageError that lists the accepted names otherwise."""
    base, _, level = name.partition(":")
    if base not in COMPRESSIONS:
        accepted = ", ".join(COMPRESSIONS)
        raise UsageError(
            f"unknown squashfs compression {name!r}: accepted are {accepted} (gzip and zstd also as NAME:LEVEL)",
            "gzip runs on every apptainer and singularity; " + "; ".join(_NOT_EVERYWHERE.values()),
        )
    if not level:
        return COMPRESSIONS[base]
    levels = _LEVELS.get(base)
    if levels is None:
        raise UsageError(f"squashfs compression {base} takes no level (got {name!r})", f"use plain {base!r}")
    if not level.isdigit() or int(level) not in levels:
        raise UsageError(f"squashfs compression level {level!r} for {base} is out of range",
                         f"use {base}:{levels.start}..{base}:{levels.stop - 1}")
    return ("-comp", base, "-Xcompression-level", str(int(level)))


def compression_note(name: str) -> str | None:
    """Which runtimes can run an image with this compression, when not every one can (for a warning)."""
    return _NOT_EVERYWHERE.get(name.partition(":")[0])


def mksquashfs_argv(sandbox: str, output: str, *, compression: str = "gzip", processors: int | None = None,
                    source_date_epoch: int | None = None, all_root: bool = False, offset: int = PARTITION_OFFSET,
                    mksquashfs: str = "mksquashfs") -> tuple[str, ...]:
    """The mksquashfs command that writes `sandbox` into `output` at `offset` (zero-filling the bytes before)."""
    if processors is not None and processors < 1:
        raise UsageError(f"mksquashfs processors must be at least 1 (got {processors})", "leave it unset to use every CPU allowed")
    argv = [
        # A SOURCE_DATE_EPOCH in the environment would make mksquashfs clamp every file time (stale
        # .pycs, see the module doc) and, together with -mkfs-time, refuse to run.
        "env", "-u", "SOURCE_DATE_EPOCH",
        mksquashfs, sandbox, output, "-noappend", *check_compression(compression),
        "-processors", str(processors if processors is not None else usable_cpus()),
        "-offset", str(offset),
        # The progress bar stays on: the executor shows its percentage in the live line and keeps it out
        # of the log (envbuild.shared.progress.progress_bar); mksquashfs draws it off a terminal too.
    ]
    if all_root:
        argv.append("-all-root")  # as apptainer build does for a non-root user: the image's files belong to root
    if source_date_epoch is not None:
        argv += ["-mkfs-time", str(checked_epoch(source_date_epoch))]
    return tuple(argv)


def checked_epoch(value: int) -> int:
    # mksquashfs stores times as unsigned 32-bit seconds.
    if not 0 <= value < 2**32:
        raise UsageError(f"source_date_epoch {value} is outside 0..{2**32 - 1}", "give seconds since 1970-01-01 UTC")
    return value
