"""Reading a SIF image's global header and descriptor table (the format: envbuild.sif.format)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from envbuild.shared.errors import ImageFormatError
from envbuild.sif.format import (
    ARCHES,
    DATA_PARTITION,
    DATA_TYPES,
    DESCRIPTOR,
    FS_TYPES,
    GROUP_MASK,
    HEADER,
    MAGIC,
    PART_TYPES,
    PARTITION_EXTRA,
    VERSION,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path  # callers may pass one; pathlib's import is not paid on `envbuild packages`' way


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
    if len(raw) < HEADER.size:
        raise ImageFormatError(path, f"the file is {len(raw)} bytes, shorter than a SIF header ({HEADER.size} bytes)",
                               "the file is truncated: copy or download it again")
    launch, _magic, version, arch, ident, *numbers = HEADER.unpack_from(raw)
    if _cstring(version) != VERSION:
        raise ImageFormatError(path, f"SIF version {_cstring(version)!r} is not supported (only {VERSION})",
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
    if len(raw) < count * DESCRIPTOR.size:
        raise ImageFormatError(path, f"descriptor table is cut short ({len(raw)} of {count * DESCRIPTOR.size} bytes)",
                               "the file is truncated or damaged: copy or download it again")
    objects = []
    for index in range(count):
        (data_type, used, ident, group, linked, offset, size, _padded, created, _modified, _uid, _gid,
         name, extra) = DESCRIPTOR.unpack_from(raw, index * DESCRIPTOR.size)
        if not used:
            continue
        if offset < 0 or size < 0 or offset + size > file_size:
            raise ImageFormatError(
                path, f"object {ident} ({DATA_TYPES.get(data_type, hex(data_type))}) lies at bytes {offset}..{offset + size}, "
                      f"past the end of the {file_size}-byte file", "the file is truncated: copy or download it again")
        fs_type = part_type = arch = ""
        if data_type == DATA_PARTITION:
            fs, part, arch_raw = PARTITION_EXTRA.unpack_from(extra)
            fs_type = FS_TYPES.get(fs, f"unknown({fs})")
            part_type = PART_TYPES.get(part, f"unknown({part})")
            arch = ARCHES.get(_cstring(arch_raw), "unknown")
        objects.append(SifObject(
            id=ident, group_id=group & ~GROUP_MASK if group else 0, linked_id=linked & ~GROUP_MASK if linked else 0,
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
            header = parse_header(handle.read(HEADER.size), path)
            if header.descriptors_total < 0 or header.descriptors_total > 100_000:
                raise ImageFormatError(path, f"implausible descriptor count {header.descriptors_total}",
                                       "the header is damaged: copy or download the image again")
            handle.seek(header.descriptors_offset)
            raw = handle.read(header.descriptors_total * DESCRIPTOR.size)
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
