"""Turn a prepared sandbox directory into a SIF image, without `apptainer build`'s copy of the tree.

`apptainer build out.sif sandbox/` first copies the whole sandbox into a temporary directory (its
build stage), runs mksquashfs on the copy into a temporary file, and then copies that file into
the new SIF. Here mksquashfs reads the sandbox itself and writes the root file system straight into
the output file at PARTITION_OFFSET; a small helper (`python -m envbuild.sif.writer`) then fills the
bytes before it with the SIF header and descriptor table and appends the two small metadata
objects. The 0.4-1.5 GB of the tree are read once and written once.

The image has the descriptors `apptainer build` writes, in the same order and group:
  1 Def.FILE      the definition file (the sandbox's /.singularity.d/Singularity)
  2 JSON.Generic  "inspect-metadata.json": what `apptainer inspect --all --json` reports for the
                  sandbox, which is exactly what apptainer build stores (it runs that same command)
  3 FS            the squashfs root file system, primary system partition, the rootfs's arch
Only the placement differs: apptainer puts the metadata before the partition; we put it after,
because its size is known only once the sandbox is final and mksquashfs needs the partition's
offset up front. SIF readers (apptainer, SingularityCE, siftool, envbuild.inventory) locate every
object through its descriptor, so the order of the data in the file does not matter to them.

Reproducible output: with `source_date_epoch`, the squashfs creation time, the SIF header and
descriptor times are that epoch and the image UUID is derived from the content, so identical trees
give byte-identical SIFs. mksquashfs >= 4.4 is reproducible by default, whatever -processors is
(measured with 4.5.1: identical output with 1 and 2 processors, and across runs). File mtimes are
kept as they are in the tree: forcing them (-all-time, or the SOURCE_DATE_EPOCH variable, which
makes mksquashfs clamp them) would make every timestamp-based .pyc in the image stale, and Python
would then recompile e.g. torch on every start from the read-only image.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
import time
import uuid
from io import BufferedIOBase
from pathlib import Path
from typing import BinaryIO

from envbuild.sif.compression import checked_epoch
from envbuild.sif.format import (
    ARCH_CODES,
    DATA_DEFFILE,
    DATA_GENERIC_JSON,
    DATA_OFFSET,
    DATA_PARTITION,
    DESCRIPTOR,
    DESCRIPTOR_CAPACITY,
    DESCRIPTORS_OFFSET,
    FS_SQUASHFS,
    GROUP_MASK,
    HEADER,
    MAGIC,
    PART_PRIMARY_SYSTEM,
    PARTITION_EXTRA,
    PARTITION_OFFSET,
    VERSION,
)

LAUNCH_SCRIPT = b"#!/usr/bin/env run-singularity\n"
_GROUP = 1 | GROUP_MASK  # 1 is the default group
METADATA_NAME = "inspect-metadata.json"
SQUASHFS_PAD = 4096  # mksquashfs pads the file system to a multiple of 4 KiB (unless -nopad)
# uuid5 namespace for image ids derived from content (any fixed UUID works; this one is ours).
_ID_NAMESPACE = uuid.UUID("6f1c5d2e-3b7a-5e0f-9a41-8d2c7e6b0a53")


# --- helper: metadata ---------------------------------------------------------------------------


def go_json(value: object) -> bytes:
    """JSON as Go's encoding/json.Marshal writes it (compact, <>& and U+2028/9 escaped, UTF-8 kept),
    so our metadata object is byte-for-byte what apptainer build stores for the same sandbox."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    for char, escaped in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        text = text.replace(char, escaped)  # these occur only inside strings in JSON text
    return text.encode("utf-8")


def inspect_metadata(runtime: str, sandbox: str) -> bytes:
    """The inspect metadata object for `sandbox`: apptainer build runs this same command on its rootfs."""
    proc = subprocess.run([runtime, "inspect", "--all", "--json", sandbox], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{runtime} inspect --all --json {sandbox} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    # json.loads keeps the key order, which is Go's (struct order, sorted map keys).
    return go_json(json.loads(proc.stdout))


def rootfs_arch(sandbox: str) -> str:
    """The architecture of the sandbox's programs (as apptainer reads it from the rootfs), else this host's,
    in Go's name as the SIF header takes it (envbuild.host.arch reads and names it)."""
    from envbuild.host.arch import go_arch, host_arch
    from envbuild.host.arch import rootfs_arch as programs_arch

    return go_arch(programs_arch(sandbox) or host_arch())


def write_objects(runtime: str, sandbox: str, out: str, upper: str | None = None) -> None:
    """Gather what the SIF holds besides the file system: definition, inspect metadata, arch. With `upper`
    (files lying over the sandbox's), from /.singularity.d of both, merged in a scratch tree under `out`:
    the runtime's inspect reads only that directory (quick: a few small files)."""
    from envbuild.imagetree.intree import host_path, open_in_tree, read_in_tree

    target = Path(out)
    target.mkdir(parents=True, exist_ok=True)
    described = sandbox
    if upper is not None:
        described = str(target / "inspect-root")
        shutil.rmtree(described, ignore_errors=True)
        for root in (sandbox, upper):
            try:  # the tree's own /.singularity.d, found inside it whatever links lead there
                found = open_in_tree(root, "/.singularity.d", os.O_PATH | os.O_DIRECTORY)
            except (FileNotFoundError, NotADirectoryError):
                continue
            try:
                shutil.copytree(host_path(found), f"{described}/.singularity.d", symlinks=True, dirs_exist_ok=True)
            finally:
                os.close(found)
    deffile = read_in_tree(described, "/.singularity.d/Singularity")  # never a host file through a link
    (target / "deffile").write_bytes(deffile[0] if deffile else b"")
    (target / METADATA_NAME).write_bytes(inspect_metadata(runtime, described))
    (target / "arch").write_text(rootfs_arch(sandbox) + "\n", encoding="utf-8")
    if upper is not None:
        shutil.rmtree(described)


# --- helper: assemble -----------------------------------------------------------------------------


def descriptor(ident: int, data_type: int, offset: int, size: int, padded: int, when: int, name: bytes = b"",
                extra: bytes = b"") -> bytes:
    return DESCRIPTOR.pack(data_type, True, ident, _GROUP, 0, offset, size, padded, when, when, 0, 0, name, extra)


def squashfs_size(handle: BinaryIO, offset: int, path: str) -> int:
    """The padded size of the squashfs mksquashfs wrote at `offset` (from its superblock, so that
    assembling twice gives the same file)."""
    superblock = os.pread(handle.fileno(), 96, offset)
    if superblock[:4] != b"hsqs":
        raise SystemExit(f"{path}: no squashfs at offset {offset} (was mksquashfs run with -offset {offset}?)")
    bytes_used: int = struct.unpack_from("<Q", superblock, 40)[0]
    size = -(-bytes_used // SQUASHFS_PAD) * SQUASHFS_PAD
    if offset + size > os.fstat(handle.fileno()).st_size:
        raise SystemExit(f"{path}: the squashfs ({bytes_used} bytes at {offset}) is cut short")
    return size


def content_id(handle: BufferedIOBase, start: int, end: int, tail: bytes, when: int, arch: bytes) -> bytes:
    """An image UUID derived from everything else in the file (name-based, RFC 4122 version 5)."""
    digest = hashlib.sha256()
    buffer = bytearray(4 << 20)
    view = memoryview(buffer)
    handle.seek(start)
    remaining = end - start
    while remaining > 0:
        count = handle.readinto(view[:min(len(buffer), remaining)])
        if not count:
            break
        digest.update(view[:count])
        remaining -= count
    digest.update(tail + struct.pack("<q", when) + arch)
    return uuid.uuid5(_ID_NAMESPACE, digest.hexdigest()).bytes


def assemble(path: str, *, deffile: bytes, metadata: bytes, arch: str, offset: int = PARTITION_OFFSET,
             epoch: int | None = None) -> None:
    """Make the file at `path`, which holds a squashfs at `offset` (and zeros before it), a SIF image:
    header and descriptors in front, definition and metadata objects after the file system.
    With `epoch`, every time field is that epoch and the UUID is derived from the content."""
    if offset < DATA_OFFSET or offset % SQUASHFS_PAD:
        raise SystemExit(f"the partition offset {offset} must be a multiple of 4096 after the descriptor table ({DATA_OFFSET})")
    if arch not in ARCH_CODES:
        raise SystemExit(f"unknown architecture {arch!r} (known: {', '.join(ARCH_CODES)})")
    arch_code = ARCH_CODES[arch] + b"\x00"
    when = int(time.time()) if epoch is None else checked_epoch(epoch)
    with open(path, "r+b") as handle:
        fs_size = squashfs_size(handle, offset, path)
        fs_end = offset + fs_size
        def_offset, json_offset = fs_end, fs_end + len(deffile)
        end = json_offset + len(metadata)
        handle.truncate(fs_end)
        handle.seek(fs_end)
        handle.write(deffile + metadata)
        partition_extra = PARTITION_EXTRA.pack(FS_SQUASHFS, PART_PRIMARY_SYSTEM, arch_code)
        write_table_and_header(handle, (
            descriptor(1, DATA_DEFFILE, def_offset, len(deffile), len(deffile), when),
            descriptor(2, DATA_GENERIC_JSON, json_offset, len(metadata), len(metadata), when, METADATA_NAME.encode()),
            # The padding in front of the partition counts as its own, as in the sif library.
            descriptor(3, DATA_PARTITION, offset, fs_size, offset - DATA_OFFSET + fs_size, when, extra=partition_extra),
        ), content=(offset, fs_end), objects=deffile + metadata, end=end, when=when, arch_code=arch_code, epoch=epoch)
    make_runnable(path)


def write_table_and_header(handle: BinaryIO, descriptors: tuple[bytes, ...], *, content: tuple[int, int], objects: bytes,
                           end: int, when: int, arch_code: bytes, epoch: int | None) -> None:
    """Write the descriptor table and then the global header in front of a SIF whose objects are in place.
    The image id is random, as apptainer build's, or with `epoch` derived from the partitions' bytes in
    `content` (start, end), the table and the `objects` after them, so identical inputs give identical files."""
    table = b"".join(descriptors).ljust(DESCRIPTOR_CAPACITY * DESCRIPTOR.size, b"\x00")
    handle.seek(DESCRIPTORS_OFFSET)
    handle.write(table)
    if epoch is None:
        ident = uuid.uuid4().bytes
    else:
        handle.flush()
        ident = content_id(handle, content[0], content[1], table + objects, when, arch_code)  # type: ignore[arg-type]
    handle.seek(0)
    handle.write(HEADER.pack(
        LAUNCH_SCRIPT, MAGIC, VERSION.encode() + b"\x00", arch_code, ident, when, when,
        DESCRIPTOR_CAPACITY - len(descriptors), DESCRIPTOR_CAPACITY, DESCRIPTORS_OFFSET, len(table), DATA_OFFSET,
        end - DATA_OFFSET,
    ))


def make_runnable(path: str) -> None:
    """Executable like apptainer's images (the launch script lets `./image.sif` run it), minus the umask."""
    mask = os.umask(0)
    os.umask(mask)
    os.chmod(path, 0o755 & ~mask)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m envbuild.sif.writer", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    meta = commands.add_parser("metadata", help="write the definition, inspect metadata and arch of a sandbox to a directory")
    meta.add_argument("--runtime", required=True, help="apptainer or singularity")
    meta.add_argument("--sandbox", required=True)
    meta.add_argument("--upper", default=None, help="a directory whose files lie over the sandbox's")
    meta.add_argument("--out", required=True)
    build = commands.add_parser("assemble", help="turn a file with a squashfs at --offset into a SIF image, in place")
    build.add_argument("--objects", required=True, help="the directory `metadata` wrote")
    build.add_argument("--offset", type=int, default=PARTITION_OFFSET)
    build.add_argument("--epoch", type=int, default=None, help="SOURCE_DATE_EPOCH: fixed times and a content-derived id")
    build.add_argument("image")
    args = parser.parse_args(argv)
    if args.command == "metadata":
        write_objects(args.runtime, args.sandbox, args.out, args.upper)
        return 0
    objects = Path(args.objects)
    assemble(args.image, deffile=(objects / "deffile").read_bytes(), metadata=(objects / METADATA_NAME).read_bytes(),
             arch=(objects / "arch").read_text(encoding="utf-8").strip(), offset=args.offset, epoch=args.epoch)
    return 0


if __name__ == "__main__":
    sys.exit(main())
