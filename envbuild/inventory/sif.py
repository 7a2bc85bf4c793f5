"""The SIF container format (sylabs/sif, version 01): global header and descriptor table.

Layout, all little-endian and packed (Go's encoding/binary, no alignment padding):
  header (128 bytes): launch script [32], magic "SIF_MAGIC\\0" [10], version "01\\0" [3], arch [3],
    uuid [16], created, modified, descriptors free, total, offset, size, data offset, size (int64 each)
  descriptor (585 bytes): data type int32, used bool, id, group id, linked id (uint32),
    offset, size, size with padding, created, modified, uid, gid (int64), name [128], extra [384]
  a partition's `extra` starts with fs type int32, partition type int32, arch [3].
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path

from envbuild.inventory.errors import ImageFormatError

MAGIC = b"SIF_MAGIC\x00"
_HEADER = struct.Struct("<32s10s3s3s16s8q")
_DESCRIPTOR = struct.Struct("<i?3I7q128s384s")
_PARTITION_EXTRA = struct.Struct("<ii3s")
# Group ids are stored with this bit set so that 0 can mean "no group".
_GROUP_MASK = 0xF0000000

DATA_TYPES = {
    0x4001: "deffile", 0x4002: "envvars", 0x4003: "labels", 0x4004: "partition", 0x4005: "signature",
    0x4006: "generic-json", 0x4007: "generic", 0x4008: "crypto-message", 0x4009: "sbom",
    0x400A: "oci-root-index", 0x400B: "oci-blob",
}
FS_TYPES = {1: "squashfs", 2: "ext3", 3: "archive", 4: "raw", 5: "encrypted-squashfs"}
PART_TYPES = {1: "system", 2: "primary-system", 3: "data", 4: "overlay"}
ARCHES = {
    "00": "unknown", "01": "386", "02": "amd64", "03": "arm", "04": "arm64", "05": "ppc64", "06": "ppc64le",
    "07": "mips", "08": "mipsle", "09": "mips64", "10": "mips64le", "11": "s390x", "12": "riscv64", "13": "loong64",
}
DATA_PARTITION = 0x4004
PART_PRIMARY_SYSTEM = 2


@dataclass(frozen=True)
class SifHeader:
    launch_script: str
    version: str
    arch: str
    image_id: str
    created_at: int
    modified_at: int
    descriptors_free: int
    descriptors_total: int
    descriptors_offset: int
    descriptors_size: int
    data_offset: int
    data_size: int


@dataclass(frozen=True)
class SifObject:
    """One used descriptor: where its data lies in the file and what it is."""

    id: int
    group_id: int  # 0 when the object belongs to no group
    linked_id: int
    data_type: str
    offset: int
    size: int
    name: str
    created_at: int
    fs_type: str = ""  # partitions only
    part_type: str = ""
    arch: str = ""


@dataclass(frozen=True)
class SifLayout:
    path: str
    file_size: int
    header: SifHeader
    objects: tuple[SifObject, ...]

    def primary_partition(self) -> SifObject:
        partitions = [o for o in self.objects if o.data_type == "partition"]
        for part in partitions:
            if part.part_type == "primary-system":
                return part
        systems = [p for p in partitions if p.part_type == "system"]
        if systems:  # images written before "primary" existed mark their root only as "system"
            return systems[0]
        raise ImageFormatError(self.path, "the SIF file has no system partition (no root file system)",
                               "this SIF holds only data objects; build a container image with apptainer build")


def _cstring(raw: bytes) -> str:
    return raw.split(b"\x00", 1)[0].decode("utf-8", errors="replace")


def _uuid_text(raw: bytes) -> str:
    # The uuid module would do this too, but importing it costs more than the whole header parse.
    text = raw.hex()
    return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"


def parse_header(raw: bytes, path: str) -> SifHeader:
    """Decode the 128-byte global header; reject files that are not SIF version 01."""
    if raw[32:42] != MAGIC:
        what = "an empty file" if not raw else "no SIF_MAGIC in the header"
        raise ImageFormatError(path, f"not a SIF image ({what})",
                               "give a .sif image built by apptainer or singularity (old .simg/ext3 images are not read)")
    if len(raw) < _HEADER.size:
        raise ImageFormatError(path, f"the file is {len(raw)} bytes, shorter than a SIF header ({_HEADER.size} bytes)",
                               "the file is truncated: copy or download it again")
    launch, _magic, version, arch, ident, *numbers = _HEADER.unpack_from(raw)
    if _cstring(version) != "01":
        raise ImageFormatError(path, f"SIF version {_cstring(version)!r} is not supported (only 01)",
                               "convert the image with a current apptainer: apptainer build new.sif old.sif")
    created, modified, free, total, desc_offset, desc_size, data_offset, data_size = numbers
    return SifHeader(
        launch_script=_cstring(launch), version=_cstring(version), arch=ARCHES.get(_cstring(arch), "unknown"),
        image_id=_uuid_text(ident), created_at=created, modified_at=modified,
        descriptors_free=free, descriptors_total=total, descriptors_offset=desc_offset,
        descriptors_size=desc_size, data_offset=data_offset, data_size=data_size,
    )


def parse_descriptors(raw: bytes, count: int, file_size: int, path: str) -> tuple[SifObject, ...]:
    """Decode `count` descriptors and keep the used ones; each must point inside the file."""
    if len(raw) < count * _DESCRIPTOR.size:
        raise ImageFormatError(path, f"descriptor table is cut short ({len(raw)} of {count * _DESCRIPTOR.size} bytes)",
                               "the file is truncated or damaged: copy or download it again")
    objects = []
    for index in range(count):
        (data_type, used, ident, group, linked, offset, size, _padded, created, _modified, _uid, _gid,
         name, extra) = _DESCRIPTOR.unpack_from(raw, index * _DESCRIPTOR.size)
        if not used:
            continue
        if offset < 0 or size < 0 or offset + size > file_size:
            raise ImageFormatError(
                path, f"object {ident} ({DATA_TYPES.get(data_type, hex(data_type))}) lies at bytes {offset}..{offset + size}, "
                      f"past the end of the {file_size}-byte file", "the file is truncated: copy or download it again")
        fs_type = part_type = arch = ""
        if data_type == DATA_PARTITION:
            fs, part, arch_raw = _PARTITION_EXTRA.unpack_from(extra)
            fs_type = FS_TYPES.get(fs, f"unknown({fs})")
            part_type = PART_TYPES.get(part, f"unknown({part})")
            arch = ARCHES.get(_cstring(arch_raw), "unknown")
        objects.append(SifObject(
            id=ident, group_id=group & ~_GROUP_MASK if group else 0, linked_id=linked & ~_GROUP_MASK if linked else 0,
            data_type=DATA_TYPES.get(data_type, f"unknown({data_type:#x})"), offset=offset, size=size,
            name=_cstring(name), created_at=created, fs_type=fs_type, part_type=part_type, arch=arch,
        ))
    return tuple(objects)


def read_sif_layout(path: str | Path) -> SifLayout:
    """Read the header and descriptor table of the SIF file at `path` (a few KiB, whatever the image size)."""
    path = str(path)
    try:
        with open(path, "rb") as handle:
            file_size = os.fstat(handle.fileno()).st_size
            header = parse_header(handle.read(_HEADER.size), path)
            if header.descriptors_total < 0 or header.descriptors_total > 100_000:
                raise ImageFormatError(path, f"implausible descriptor count {header.descriptors_total}",
                                       "the header is damaged: copy or download the image again")
            handle.seek(header.descriptors_offset)
            raw = handle.read(header.descriptors_total * _DESCRIPTOR.size)
    except IsADirectoryError:
        raise ImageFormatError(path, "is a directory, not a SIF file",
                               "for a sandbox directory, build it into a SIF first: apptainer build img.sif DIR/") from None
    except OSError as exc:
        raise ImageFormatError(path, f"cannot read: {exc.strerror or exc}", "check the path and its permissions") from None
    return SifLayout(path=path, file_size=file_size, header=header,
                     objects=parse_descriptors(raw, header.descriptors_total, file_size, path))


def read_object(layout: SifLayout, obj: SifObject, limit: int = 16 * 1024 * 1024) -> bytes:
    """The data of a small object (definition file, JSON metadata, labels), at most `limit` bytes."""
    with open(layout.path, "rb") as handle:
        return os.pread(handle.fileno(), min(obj.size, limit), obj.offset)
