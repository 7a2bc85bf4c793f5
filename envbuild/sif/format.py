"""The SIF container format (sylabs/sif, version 01): the byte layout and code tables that both the
reader (envbuild.sif.reader) and the writer (envbuild.sif.writer) follow.
envrun reads an image's architecture from its header on every launch (read_sif_arch: 128 bytes,
no other import than struct).

Layout, all little-endian and packed (Go's encoding/binary, no alignment padding):
  header (128 bytes): launch script [32], magic "SIF_MAGIC\\0" [10], version "01\\0" [3], arch [3],
    uuid [16], created, modified, descriptors free, total, offset, size, data offset, size (int64 each)
  descriptor (585 bytes): data type int32, used bool, id, group id, linked id (uint32),
    offset, size, size with padding, created, modified, uid, gid (int64), name [128], extra [384]
  a partition's `extra` starts with fs type int32, partition type int32, arch [3].
"""

from __future__ import annotations

import struct

MAGIC = b"SIF_MAGIC\x00"
_HEADER_SIZE = 128
_MAGIC_AT, _ARCH_AT = 32, 45  # after the 32-byte launch script; arch after magic [10] and version [3]
# The header's and a partition's arch codes, with Go's GOARCH names.
ARCHES = {
    "00": "unknown", "01": "386", "02": "amd64", "03": "arm", "04": "arm64", "05": "ppc64", "06": "ppc64le",
    "07": "mips", "08": "mipsle", "09": "mips64", "10": "mips64le", "11": "s390x", "12": "riscv64", "13": "loong64",
}

VERSION = "01"
HEADER = struct.Struct("<32s10s3s3s16s8q")
DESCRIPTOR = struct.Struct("<i?3I7q128s384s")
PARTITION_EXTRA = struct.Struct("<ii3s")
DESCRIPTORS_OFFSET = 4096
DESCRIPTOR_CAPACITY = 48
DATA_OFFSET = DESCRIPTORS_OFFSET + DESCRIPTOR_CAPACITY * DESCRIPTOR.size
# Where the squashfs starts: the first 4096-aligned offset after the 48-descriptor table, as a
# partition written by the sif library is aligned (header 128 B, table at 4096, 48 x 585 B).
PARTITION_OFFSET = 32768
# Group ids are stored with this bit set so that 0 can mean "no group".
GROUP_MASK = 0xF0000000

DATA_DEFFILE, DATA_PARTITION, DATA_GENERIC_JSON = 0x4001, 0x4004, 0x4006
DATA_TYPES = {
    DATA_DEFFILE: "deffile", 0x4002: "envvars", 0x4003: "labels", DATA_PARTITION: "partition", 0x4005: "signature",
    DATA_GENERIC_JSON: "generic-json", 0x4007: "generic", 0x4008: "crypto-message", 0x4009: "sbom",
    0x400A: "oci-root-index", 0x400B: "oci-blob",
}
FS_SQUASHFS = 1
FS_TYPES = {FS_SQUASHFS: "squashfs", 2: "ext3", 3: "archive", 4: "raw", 5: "encrypted-squashfs"}
PART_PRIMARY_SYSTEM = 2
PART_TYPES = {1: "system", PART_PRIMARY_SYSTEM: "primary-system", 3: "data", 4: "overlay"}
ARCH_CODES = {name: code.encode() for code, name in ARCHES.items() if name != "unknown"}


def read_sif_arch(path: str) -> str | None:
    """The Go architecture name in a SIF file's global header ('amd64', 'arm64', 'unknown'); None when the
    file is not a SIF (a sandbox directory, a missing or other file). Reads 128 bytes: cheap enough for
    envrun's every launch, which uses it to refuse an image of another architecture before it starts."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read(_HEADER_SIZE)
    except OSError:
        return None
    if len(raw) < _HEADER_SIZE or raw[_MAGIC_AT:_MAGIC_AT + len(MAGIC)] != MAGIC:
        return None
    code = raw[_ARCH_AT:_ARCH_AT + 3].split(b"\x00", 1)[0].decode("ascii", errors="replace")
    return ARCHES.get(code, "unknown")
