"""The SIF container format (sylabs/sif, version 01): the byte layout and code tables that both the
reader (envbuild.inventory.sif) and the writer (envbuild.build.squash) follow.

Layout, all little-endian and packed (Go's encoding/binary, no alignment padding):
  header (128 bytes): launch script [32], magic "SIF_MAGIC\\0" [10], version "01\\0" [3], arch [3],
    uuid [16], created, modified, descriptors free, total, offset, size, data offset, size (int64 each)
  descriptor (585 bytes): data type int32, used bool, id, group id, linked id (uint32),
    offset, size, size with padding, created, modified, uid, gid (int64), name [128], extra [384]
  a partition's `extra` starts with fs type int32, partition type int32, arch [3].
"""

from __future__ import annotations

import struct

from envbuild.inventory.sifarch import ARCHES, MAGIC

VERSION = "01"
HEADER = struct.Struct("<32s10s3s3s16s8q")
DESCRIPTOR = struct.Struct("<i?3I7q128s384s")
PARTITION_EXTRA = struct.Struct("<ii3s")
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

__all__ = ["ARCHES", "MAGIC"]  # re-exported from envbuild.inventory.sifarch (their home: envrun reads it)
