"""`--layered`: write only what changed as a squashfs overlay partition on top of a stored image's squashfs.

Adding one package to the reference spec changes a few hundred KiB of a 1.3 GB tree, yet a full squash
compresses all of it again. Here the new image is:
  1 Def.FILE, 2 JSON.Generic   as in a full image (the new definition and labels)
  3 FS primary system          the parent image's squashfs, copied byte for byte (no recompression)
  4 FS overlay (squashfs)      the new and changed paths, plus a whiteout (char device 0/0) for each
                               removed path: overlayfs semantics, as apptainer stacks a SIF's overlay
                               partitions as read-only lower layers above the root file system.
The parent is a full image in the store whose tree manifest (envbuild.sif.manifest) was
recorded when it was squashed. The other ways weighed (docs/reports/performance.md): mksquashfs append adds
files only under new names in the root directory (it cannot replace or remove a file), and reusing
compressed blocks would need a squashfs writer of our own.

Who runs such an image (sources: apptainer and SingularityCE internal/pkg/runtime/engine/*/
container_linux.go addOverlayMount, prepare_linux.go setSessionLayer; the code is there since
Singularity 3.1.1, 2019): a runtime that uses its overlay session layer mounts each squashfs overlay
partition (kernel mount: root or setuid install).
A runtime in underlay mode (`enable overlay = no`, `--underlay`), or an unprivileged one that cannot
mount the SIF and extracts its primary partition to a temporary sandbox (apptainer 1.4.5 here as a
non-root user), ignores the partition *silently* and runs the parent. Hence opt-in, and every layered
image is checked right after it is written: the local runtime must show a changed file; otherwise
the build falls back to a full squash.

Anything that makes the layered form wrong or pointless falls back to a full squash too (no manifest,
another compression or owner mode, a difference over MAX_FRACTION of the tree, whiteouts without the
right to make device nodes). Bit-identical: with SOURCE_DATE_EPOCH the delta (sorted, times clamped,
fixed mkfs time) and the SIF (fixed times, content-derived id) are the same for the same parent image.
"""

from __future__ import annotations

import argparse
import os
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import BinaryIO

from envbuild.shared.safefiles import link_or_copy, linked_copy_argv
from envbuild.sif.compression import checked_epoch, mksquashfs_argv
from envbuild.sif.format import (
    ARCH_CODES,
    DATA_DEFFILE,
    DATA_GENERIC_JSON,
    DATA_OFFSET,
    DATA_PARTITION,
    FS_SQUASHFS,
    PART_PRIMARY_SYSTEM,
    PARTITION_EXTRA,
    PARTITION_OFFSET,
)
from envbuild.sif.manifest import Delta, TreeView, compute_delta, read_manifest, walk, write_manifest
from envbuild.sif.reader import read_sif_layout
from envbuild.sif.writer import (
    METADATA_NAME,
    SQUASHFS_PAD,
    assemble,
    descriptor,
    make_runnable,
    squashfs_size,
    write_table_and_header,
)

PART_OVERLAY = 4
# Above this share of the tree's bytes a delta saves too little and stacks a large second copy.
MAX_FRACTION = 0.25
CHECK_FILE = "/.envbuild/build.json"  # rewritten by every build (image key, time): always in the delta


class Fallback(Exception):
    """The layered form does not apply: squash the whole tree instead (the message says why)."""


def _host(root: str, rel: str) -> str:
    return root if rel == "/" else os.path.join(root, rel.lstrip("/"))


def stage_delta(tree: TreeView, delta: Delta, staging: str, *, epoch: int | None) -> None:
    """Build the upper layer's tree in `staging`: hard links to the tree's new files, copies of its
    links and special files, whiteouts, and every directory on the way with the tree's attributes."""
    os.mkdir(staging)
    dirs = {"/"}

    def ensure_dir(rel: str) -> None:
        if rel in dirs:
            return
        ensure_dir(os.path.dirname(rel))
        os.mkdir(_host(staging, rel))
        dirs.add(rel)

    for rel in delta.paths:
        if rel == "/":
            continue
        source, target = tree.host(rel), _host(staging, rel)
        info = os.lstat(source)
        ensure_dir(os.path.dirname(rel))
        if stat.S_ISDIR(info.st_mode):
            ensure_dir(rel)
        elif stat.S_ISREG(info.st_mode):
            link_or_copy(source, target)
        elif stat.S_ISLNK(info.st_mode):
            os.symlink(os.readlink(source), target)
            _copy_attrs(info, target)
        else:
            _mknod(target, info.st_mode, info.st_rdev)
            _copy_attrs(info, target)
    for rel in delta.whiteouts:
        ensure_dir(os.path.dirname(rel))
        target = _host(staging, rel)
        _mknod(target, stat.S_IFCHR, os.makedev(0, 0))
        parent = os.lstat(tree.host(os.path.dirname(rel)))
        when = parent.st_mtime_ns if epoch is None else min(parent.st_mtime_ns, epoch * 10**9)
        os.utime(target, ns=(when, when), follow_symlinks=False)
    for rel in sorted(dirs, key=lambda path: -path.count("/")):  # deepest first: children change a dir's mtime
        _copy_attrs(os.lstat(tree.host(rel)), _host(staging, rel))


def _mknod(path: str, mode: int, device: int) -> None:
    # Real device nodes, not mksquashfs pseudo definitions (-p "PATH c 000 0 0 0 0", which need no root):
    # mksquashfs 4.5.1 stamps those with the current time, so the image would differ on every build.
    try:
        os.mknod(path, mode, device)
    except PermissionError:
        raise Fallback("making device nodes (overlay whiteouts) needs root here") from None


def _copy_attrs(info: os.stat_result, path: str) -> None:
    if not stat.S_ISLNK(info.st_mode):
        os.chmod(path, stat.S_IMODE(info.st_mode))
    if os.geteuid() == 0:
        os.lchown(path, info.st_uid, info.st_gid)
    os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns), follow_symlinks=False)


def _copy_range(source: str, offset: int, size: int, target: BinaryIO) -> None:
    with open(source, "rb") as handle:
        done = 0
        while done < size:
            count = os.copy_file_range(handle.fileno(), target.fileno(), size - done, offset + done)
            if count <= 0:
                raise OSError(f"{source}: short read at {offset + done}")
            done += count


def assemble_layered(path: str, *, parent_sif: str, delta_file: str, deffile: bytes, metadata: bytes, arch: str,
                     epoch: int | None) -> None:
    """Write the SIF `path`: the parent's primary squashfs, the delta as an overlay partition, then the
    definition and metadata objects (as envbuild.sif.writer.assemble lays out a full image)."""
    layout = read_sif_layout(parent_sif)
    primary = layout.primary_partition()
    arch_code = ARCH_CODES[arch] + b"\x00"
    when = int(time.time()) if epoch is None else checked_epoch(epoch)
    delta_size = os.path.getsize(delta_file)
    with open(path, "w+b") as handle:
        handle.truncate(PARTITION_OFFSET)
        handle.seek(PARTITION_OFFSET)
        _copy_range(parent_sif, primary.offset, primary.size, handle)
        fs_size = squashfs_size(handle, PARTITION_OFFSET, path)
        overlay_offset = PARTITION_OFFSET + fs_size  # fs_size is a multiple of 4096
        handle.truncate(overlay_offset)
        handle.seek(overlay_offset)
        _copy_range(delta_file, 0, delta_size, handle)
        overlay_size = -(-delta_size // SQUASHFS_PAD) * SQUASHFS_PAD
        overlay_end = overlay_offset + overlay_size
        handle.truncate(overlay_end)
        handle.seek(overlay_end)
        handle.write(deffile + metadata)
        def_offset, json_offset = overlay_end, overlay_end + len(deffile)
        end = json_offset + len(metadata)
        write_table_and_header(handle, (
            descriptor(1, DATA_DEFFILE, def_offset, len(deffile), len(deffile), when),
            descriptor(2, DATA_GENERIC_JSON, json_offset, len(metadata), len(metadata), when, METADATA_NAME.encode()),
            descriptor(3, DATA_PARTITION, PARTITION_OFFSET, fs_size, PARTITION_OFFSET - DATA_OFFSET + fs_size, when,
                        extra=PARTITION_EXTRA.pack(FS_SQUASHFS, PART_PRIMARY_SYSTEM, arch_code)),
            # Same group as the root file system: apptainer ignores overlay partitions of other groups.
            descriptor(4, DATA_PARTITION, overlay_offset, overlay_size, overlay_size, when,
                        name=b"envbuild-delta", extra=PARTITION_EXTRA.pack(FS_SQUASHFS, PART_OVERLAY, arch_code)),
        ), content=(PARTITION_OFFSET, overlay_end), objects=deffile + metadata, end=end, when=when, arch_code=arch_code,
            epoch=epoch)
    make_runnable(path)


def check_runtime_sees(runtime: str, image: str, tree: TreeView, rel: str) -> None:
    """The local runtime must show the delta's version of `rel`: a runtime that ignores overlay
    partitions would run the parent image instead, without a word."""
    try:
        proc = subprocess.run([runtime, "exec", "--cleanenv", "--no-home", image, "cat", rel], capture_output=True,
                              check=False, timeout=300)
    except subprocess.TimeoutExpired:
        raise Fallback(f"{runtime} exec {image} did not finish in 300 s") from None
    with open(tree.host(rel), "rb") as handle:
        wanted = handle.read()
    if proc.returncode != 0 or proc.stdout != wanted:
        raise Fallback(f"{runtime} did not show the overlay partition's {rel} (it may ignore SIF overlay partitions "
                       f"in this mode); {proc.stderr.decode(errors='replace').strip()[-300:]}")


def layered_squash(args: argparse.Namespace) -> str:
    """Write the layered image, or raise Fallback. Returns a line describing the delta."""
    manifest = read_manifest(args.manifest)
    if manifest is None:
        raise Fallback(f"no readable tree manifest at {args.manifest}")
    if manifest.get("compression") != args.compression or bool(manifest.get("all_root")) != args.all_root:
        raise Fallback("the parent image was squashed with another compression or owner mode")
    tree = TreeView(args.sandbox, args.upper)
    entries = manifest.get("entries")
    if not isinstance(entries, dict):
        raise Fallback(f"the tree manifest at {args.manifest} lists no entries")
    delta = compute_delta(tree, entries)
    if delta.bytes > MAX_FRACTION * max(delta.tree_bytes, 1):
        raise Fallback(f"the difference is {delta.bytes / 1e6:.0f} MB of {delta.tree_bytes / 1e6:.0f} MB")
    staging = f"{args.work}/delta-tree"
    delta_file = f"{args.work}/delta.sqsh"
    shutil.rmtree(staging, ignore_errors=True)
    stage_delta(tree, delta, staging, epoch=args.epoch)
    argv = mksquashfs_argv(staging, delta_file, compression=args.compression, processors=args.processors,
                           source_date_epoch=args.epoch, all_root=args.all_root, offset=0)
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    objects = Path(args.objects)
    assemble_layered(args.image, parent_sif=args.parent_sif, delta_file=delta_file,
                     deffile=(objects / "deffile").read_bytes(), metadata=(objects / METADATA_NAME).read_bytes(),
                     arch=(objects / "arch").read_text(encoding="utf-8").strip(), epoch=args.epoch)
    shutil.rmtree(staging, ignore_errors=True)
    os.unlink(delta_file)
    if args.runtime and os.path.isfile(tree.host(CHECK_FILE)):
        check_runtime_sees(args.runtime, args.image, tree, CHECK_FILE)
    return (f"layered image: {len(delta.paths)} new or changed paths ({delta.bytes / 1e6:.1f} MB), "
            f"{len(delta.whiteouts)} removed, over {args.parent_sif}")


def merge_upper(lower: str, upper: str, merged: str) -> None:
    """The sandbox a build without an upper layer would have made: `lower` hard-linked (as the sandbox
    step does), then `upper`'s files put in place of the lower ones (replaced, never written through a
    shared link) and its directories' attributes kept where lower has none."""
    shutil.rmtree(merged, ignore_errors=True)
    subprocess.run(linked_copy_argv(lower, merged), check=True)
    for rel, info in walk(upper).items():  # parents first: every directory on the way is a real one by then
        target = _host(merged, rel)
        if stat.S_ISDIR(info.st_mode):
            # A link in lower (the base's /.envbuild -> a host directory) is replaced, as the overlay's upper
            # directory hides it, never followed: what is written below it would land on the host.
            if os.path.islink(target) or not os.path.isdir(target):
                if os.path.lexists(target):
                    os.unlink(target)
                os.mkdir(target)
                _copy_attrs(info, target)
            continue
        if os.path.isdir(target) and not os.path.islink(target):
            shutil.rmtree(target)
        elif os.path.lexists(target):
            os.unlink(target)
        if stat.S_ISLNK(info.st_mode):
            os.symlink(os.readlink(_host(upper, rel)), target)
            _copy_attrs(info, target)
        else:
            shutil.copy2(_host(upper, rel), target, follow_symlinks=False)
            if os.geteuid() == 0:
                os.lchown(target, info.st_uid, info.st_gid)


def full_squash(args: argparse.Namespace) -> None:
    """The ordinary image (envbuild.sif.writer), with its manifest, so that it can be a parent itself."""
    sandbox = args.sandbox
    if args.upper:
        sandbox = f"{args.work}/merged"
        merge_upper(args.sandbox, args.upper, sandbox)
    subprocess.run(mksquashfs_argv(sandbox, args.image, compression=args.compression, processors=args.processors,
                                   source_date_epoch=args.epoch, all_root=args.all_root), check=True,
                   stdout=subprocess.DEVNULL)
    objects = Path(args.objects)
    assemble(args.image, deffile=(objects / "deffile").read_bytes(), metadata=(objects / METADATA_NAME).read_bytes(),
             arch=(objects / "arch").read_text(encoding="utf-8").strip(), epoch=args.epoch)
    if args.manifest_out:
        write_manifest(sandbox, args.manifest_out, compression=args.compression, all_root=args.all_root)
    if args.upper:
        subprocess.run(["rm", "-rf", "--one-file-system", sandbox], check=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m envbuild.sif.layeredwriter", description=__doc__.splitlines()[0])
    parser.add_argument("--sandbox", required=True)
    parser.add_argument("--upper", default=None, help="a directory whose files lie over the sandbox's (the user layer)")
    parser.add_argument("--parent-sif", required=True)
    parser.add_argument("--manifest", required=True, help="the parent's tree manifest")
    parser.add_argument("--manifest-out", default="", help="where a fallback full image's manifest goes")
    parser.add_argument("--objects", required=True, help="the directory `python -m envbuild.sif.writer metadata` wrote")
    parser.add_argument("--work", required=True)
    parser.add_argument("--compression", required=True)
    parser.add_argument("--processors", type=int, default=None)
    parser.add_argument("--epoch", type=int, default=None)
    parser.add_argument("--all-root", action="store_true")
    parser.add_argument("--runtime", default="", help="check the image with this runtime (empty: no check)")
    parser.add_argument("image")
    args = parser.parse_args(argv)
    try:
        print(f"envbuild-note: {layered_squash(args)}", flush=True)
    except Fallback as why:
        # The prefix makes the executor show the line (envbuild.builder.execute.executor.HELPER_NOTE).
        print(f"envbuild-note: note: --layered: squashing the whole tree after all: {why}", flush=True)
        for leftover in (f"{args.work}/delta-tree",):
            shutil.rmtree(leftover, ignore_errors=True)
        if os.path.exists(args.image):
            os.unlink(args.image)
        full_squash(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
