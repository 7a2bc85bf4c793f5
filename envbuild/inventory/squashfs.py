"""A small read-only squashfs 4.0 reader: list directories, follow symlinks, read the start of files.

Written for the inventory, which reads a few hundred directories and small files out of images of
many GiB, so it decompresses only the metadata blocks it touches (cached) and stops reading a file at
`limit`. Format reference: the Linux kernel's Documentation/filesystems/squashfs.rst and
fs/squashfs/squashfs_fs.h. All numbers are little-endian.

Why not a library from PyPI: on this inventory's walk of the reference image, dissect.squashfs took
several times this reader's time plus its import, and it is AGPL-3.0 (envbuild is MIT); PySquashfsImage
was slower still, because it reads the whole directory tree when it opens an image (figures:
docs/reports/performance.md).
"""

from __future__ import annotations

import lzma
import os
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from envbuild.imagetree.inroot import Link, resolve_in_root
from envbuild.shared.errors import ImageFormatError

SQUASHFS_MAGIC = 0x73717368  # "hsqs"
_SUPERBLOCK = struct.Struct("<5I6H8Q")
_INODE_BASE = struct.Struct("<4H2I")
_DIR_INODE = struct.Struct("<IIHHI")  # start block, nlink, listing size, offset, parent
_LDIR_INODE = struct.Struct("<4IHHI")  # nlink, listing size, start block, parent, index count, offset, xattr
_REG_INODE = struct.Struct("<4I")  # blocks start, fragment, fragment offset, size
_LREG_INODE = struct.Struct("<3Q4I")  # blocks start, size, sparse, nlink, fragment, fragment offset, xattr
_SYMLINK_INODE = struct.Struct("<2I")  # nlink, target length
_DIR_HEADER = struct.Struct("<3I")  # entries - 1, inode block, base inode number
_DIR_ENTRY = struct.Struct("<HhHH")  # inode offset, inode number delta, type, name length - 1
_FRAGMENT_ENTRY = struct.Struct("<QII")
_METADATA_HEADER = struct.Struct("<H")

METADATA_SIZE = 8192
_METADATA_UNCOMPRESSED = 0x8000
_DATA_UNCOMPRESSED = 1 << 24
_NO_FRAGMENT = 0xFFFFFFFF
_FLAG_COMPRESSOR_OPTIONS = 0x0400
_METADATA_CACHE_BLOCKS = 4096  # 32 MiB
_INODE_CACHE_ENTRIES = 1 << 16
_MAX_LISTING = 64 << 20  # a directory of a million entries takes about 40 MiB
_MAX_BLOCK = 1 << 20  # squashfs blocks are at most 1 MiB

COMPRESSIONS = {1: "gzip", 2: "lzma", 3: "lzo", 4: "xz", 5: "lz4", 6: "zstd"}
_KINDS = {1: "dir", 2: "file", 3: "symlink", 8: "dir", 9: "file", 10: "symlink"}

# What a damaged image can make the parsing raise besides our own errors (codec errors are caught
# where blocks are decompressed); image.py turns these into one clear per-image error.
DECODE_ERRORS = (struct.error, ValueError, IndexError, KeyError, OverflowError, UnicodeError, RecursionError)


@dataclass(frozen=True)
class Superblock:
    inodes: int
    mkfs_time: int
    block_size: int
    fragments: int
    compression: str
    block_log: int
    flags: int
    ids: int
    major: int
    minor: int
    root_inode: int
    bytes_used: int
    id_table_start: int
    xattr_id_table_start: int
    inode_table_start: int
    directory_table_start: int
    fragment_table_start: int
    export_table_start: int


class Entry:
    """One name in a directory listing: its inode reference and what kind of file it is. A plain class with
    slots, not a frozen dataclass: a walk makes one per name it lists, and a frozen dataclass is several times
    slower to make."""

    __slots__ = ("kind", "name", "ref")

    def __init__(self, name: str, ref: int, kind: str) -> None:
        self.name = name
        self.ref = ref
        self.kind = kind  # dir | file | symlink | other

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Entry) and (self.name, self.ref, self.kind) == (other.name, other.ref, other.kind)

    def __hash__(self) -> int:
        return hash((self.name, self.ref, self.kind))

    def __repr__(self) -> str:
        return f"Entry({self.name!r}, {self.ref}, {self.kind!r})"


@dataclass(frozen=True)
class Inode:
    kind: str
    mode: int
    mtime: int
    size: int = 0  # file size, or directory listing size
    start: int = 0  # first data block (file) or listing block (directory)
    offset: int = 0  # listing offset (directory) or offset in the fragment (file)
    fragment: int = _NO_FRAGMENT
    tail_ref: tuple[int, int] = (0, 0)  # (block, offset) right after the fixed part: a file's block sizes
    target: str = ""  # symlink


def parse_superblock(raw: bytes, where: str) -> Superblock:
    if len(raw) < _SUPERBLOCK.size:
        raise ImageFormatError(where, "the squashfs partition is shorter than its superblock",
                               "the image is truncated: copy or download it again")
    (magic, inodes, mkfs_time, block_size, fragments, compression, block_log, flags, ids, major, minor,
     *tables) = _SUPERBLOCK.unpack_from(raw)
    if magic != SQUASHFS_MAGIC:
        raise ImageFormatError(where, "the system partition is not a squashfs file system (bad magic)",
                               "the image is damaged, or its partition is encrypted or ext3: try --via-runtime")
    if major != 4:
        raise ImageFormatError(where, f"squashfs version {major}.{minor} is not supported (only 4.x)",
                               "rebuild the image with a current apptainer/mksquashfs")
    if block_size != 1 << block_log or not 4096 <= block_size <= 1 << 20:
        raise ImageFormatError(where, f"squashfs block size {block_size} is invalid", "the image is damaged")
    return Superblock(inodes, mkfs_time, block_size, fragments, COMPRESSIONS.get(compression, f"unknown({compression})"),
                      block_log, flags, ids, major, minor, *tables)


Decompress = Callable[[bytes, int], bytes]


def _decompressor(name: str, where: str) -> tuple[Decompress, tuple[type[Exception], ...]]:
    """A function (compressed, wanted) -> bytes for the image's compression, and the errors it raises
    on damaged data. It returns at least the first `wanted` bytes (all of them when the block is
    shorter); where the codec can stop early it does, because a file's first bytes are often all the
    inventory needs of a 128 KiB block."""
    if name == "gzip":
        inflate = gzip_inflater()
        return (lambda data, wanted: inflate.decompressobj().decompress(data, wanted)), (inflate.error,)
    if name in ("xz", "lzma"):
        form = lzma.FORMAT_XZ if name == "xz" else lzma.FORMAT_ALONE
        return (lambda data, wanted: lzma.LZMADecompressor(form).decompress(data, max_length=wanted)), (lzma.LZMAError,)
    if name == "zstd":
        try:
            import zstandard
        except ImportError:
            raise ImageFormatError(where, "uses zstd compression and the Python module zstandard is missing",
                                   "pip install zstandard (a dependency of envbuild), or use --via-runtime") from None
        decompressor = zstandard.ZstdDecompressor()
        return (lambda data, wanted: decompressor.stream_reader(data).read(wanted)), (zstandard.ZstdError,)
    if name == "lz4":
        try:
            import lz4.block
        except ImportError:
            raise ImageFormatError(where, "uses lz4 compression and the Python module lz4 is missing",
                                   "pip install lz4 (a dependency of envbuild), or use --via-runtime") from None
        return (lambda data, _wanted: lz4.block.decompress(data, uncompressed_size=_MAX_BLOCK)), (lz4.block.LZ4BlockError,)
    raise ImageFormatError(where, f"uses {name} compression, which envbuild cannot read",
                           "use --via-runtime, or rebuild with gzip, xz, lz4 or zstd (apptainer build --mksquashfs-args)")


def gzip_inflater() -> Any:
    """The module that inflates gzip (deflate) blocks: zlib-ng's binding where it is installed (a dependency of
    envbuild; it inflates the same bytes in well under zlib's time, and apptainer squashes with gzip by
    default), else the standard library's zlib. Both have zlib's decompressobj and error."""
    try:
        from zlib_ng import zlib_ng
    except ImportError:
        return zlib
    return zlib_ng


class Squashfs:
    """A squashfs file system stored at `offset` in the file `path`, `length` bytes long."""

    def __init__(self, path: str, offset: int = 0, length: int | None = None) -> None:
        self.path = path
        self._fd = os.open(path, os.O_RDONLY)
        try:
            self._base = offset
            self._length = length if length is not None else os.fstat(self._fd).st_size - offset
            self.superblock = parse_superblock(self._read(0, _SUPERBLOCK.size), path)
            if self.superblock.bytes_used > self._length:
                raise ImageFormatError(path, f"the squashfs says it is {self.superblock.bytes_used} bytes but only "
                                             f"{self._length} are there", "the image is truncated: copy or download it again")
            self._decompressor, self._codec_errors = _decompressor(self.superblock.compression, path)
        except BaseException:
            os.close(self._fd)
            raise
        self._metadata_cache: dict[int, tuple[bytes, int]] = {}
        self._data_cache: dict[int, tuple[bytes, bool]] = {}  # position -> (bytes, whole block?)
        self._fragment_index: tuple[int, ...] | None = None
        self._inodes: dict[int, Inode] = {}

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> Squashfs:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # -- raw access -------------------------------------------------------------------------

    def _read(self, position: int, count: int) -> bytes:
        if position < 0 or position + count > self._length:
            raise ImageFormatError(self.path, f"a squashfs pointer leads to byte {position}, outside the {self._length}-byte "
                                              "partition", "the image is truncated or damaged: copy or download it again")
        data = os.pread(self._fd, count, self._base + position)
        if len(data) != count:
            raise ImageFormatError(self.path, f"the file ends before byte {self._base + position + count}",
                                   "the image is truncated: copy or download it again")
        return data

    def _decompress(self, data: bytes, wanted: int, position: int) -> bytes:
        try:
            return self._decompressor(data, wanted)
        except self._codec_errors as exc:
            raise ImageFormatError(self.path, f"the compressed block at squashfs byte {position} is damaged ({exc})",
                                   "the file is corrupt: copy or download it again") from None

    def _metadata_block(self, position: int) -> tuple[bytes, int]:
        """The decompressed metadata block at `position`, and the position of the next one."""
        cached = self._metadata_cache.get(position)
        if cached is not None:
            return cached
        # The header and the largest block it can announce in one read (a system call each costs more than the
        # few KiB read past a short block); near the partition's end, only what is there.
        chunk = self._read(position, max(2, min(2 + METADATA_SIZE, self._length - position)))
        (word,) = _METADATA_HEADER.unpack_from(chunk)
        size = word & ~_METADATA_UNCOMPRESSED
        if not 0 < size <= METADATA_SIZE:
            raise ImageFormatError(self.path, f"bad metadata block header at squashfs byte {position}", "the image is damaged")
        data = chunk[2:2 + size] if 2 + size <= len(chunk) else self._read(position + 2, size)
        if not word & _METADATA_UNCOMPRESSED:
            data = self._decompress(data, METADATA_SIZE + 1, position)
        result = (data, position + 2 + size)
        if len(self._metadata_cache) >= _METADATA_CACHE_BLOCKS:  # a walk reads a few hundred; bound a crafted image
            self._metadata_cache.clear()
        self._metadata_cache[position] = result
        return result

    def _metadata(self, position: int, offset: int, count: int) -> tuple[bytes, int, int]:
        """`count` bytes of a metadata stream that may run over block ends; returns (bytes, next position, next offset)."""
        block, next_position = self._metadata_block(position)
        if offset + count <= len(block):
            return block[offset:offset + count], position, offset + count
        parts = [block[offset:]]
        remaining = count - len(parts[0])
        while remaining > 0:
            position = next_position
            block, next_position = self._metadata_block(position)
            parts.append(block[:remaining])
            remaining -= len(parts[-1])
            offset = len(parts[-1])
        return b"".join(parts), position, offset

    # -- inodes and directories -------------------------------------------------------------

    @property
    def root_ref(self) -> int:
        return self.superblock.root_inode

    def inode(self, ref: int) -> Inode:
        """Decode the inode that the reference (block << 16 | offset, relative to the inode table) points at
        (each once: the walk asks again for a file it ordered its reads by)."""
        inode = self._inodes.get(ref)
        if inode is None:
            if len(self._inodes) >= _INODE_CACHE_ENTRIES:  # a walk decodes a few hundred; bound a crafted image
                self._inodes.clear()
            inode = self._inodes[ref] = self._decode_inode(ref)
        return inode

    def _decode_inode(self, ref: int) -> Inode:
        position = self.superblock.inode_table_start + (ref >> 16)
        raw, position, offset = self._metadata(position, ref & 0xFFFF, _INODE_BASE.size)
        inode_type, mode, _uid, _gid, mtime, _number = _INODE_BASE.unpack(raw)
        kind = _KINDS.get(inode_type, "other")
        if inode_type == 1:
            raw, position, offset = self._metadata(position, offset, _DIR_INODE.size)
            start, _nlink, size, listing_offset, _parent = _DIR_INODE.unpack(raw)
            return Inode(kind, mode, mtime, size=size, start=start, offset=listing_offset)
        if inode_type == 8:
            raw, position, offset = self._metadata(position, offset, _LDIR_INODE.size)
            _nlink, size, start, _parent, _count, listing_offset, _xattr = _LDIR_INODE.unpack(raw)
            return Inode(kind, mode, mtime, size=size, start=start, offset=listing_offset)
        if inode_type == 2:
            raw, position, offset = self._metadata(position, offset, _REG_INODE.size)
            start, fragment, fragment_offset, size = _REG_INODE.unpack(raw)
            return Inode(kind, mode, mtime, size=size, start=start, offset=fragment_offset, fragment=fragment,
                         tail_ref=(position, offset))
        if inode_type == 9:
            raw, position, offset = self._metadata(position, offset, _LREG_INODE.size)
            start, size, _sparse, _nlink, fragment, fragment_offset, _xattr = _LREG_INODE.unpack(raw)
            return Inode(kind, mode, mtime, size=size, start=start, offset=fragment_offset, fragment=fragment,
                         tail_ref=(position, offset))
        if inode_type in (3, 10):
            raw, position, offset = self._metadata(position, offset, _SYMLINK_INODE.size)
            _nlink, length = _SYMLINK_INODE.unpack(raw)
            if length > 4096:
                raise ImageFormatError(self.path, f"symlink target of {length} bytes", "the image is damaged")
            raw, _, _ = self._metadata(position, offset, length)
            return Inode(kind, mode, mtime, size=length, target=raw.decode("utf-8", errors="surrogateescape"))
        return Inode(kind, mode, mtime)

    def is_whiteout(self, ref: int) -> bool:
        """Whether the inode is an overlayfs whiteout (a character device 0/0): in a SIF overlay partition
        (envbuild build --layered) it hides the path in the layers below."""
        position = self.superblock.inode_table_start + (ref >> 16)
        raw, position, offset = self._metadata(position, ref & 0xFFFF, _INODE_BASE.size)
        inode_type = _INODE_BASE.unpack(raw)[0]
        if inode_type not in (5, 12):  # basic and extended character device
            return False
        raw, _, _ = self._metadata(position, offset, 8)
        _nlink, rdev = struct.unpack("<2I", raw)
        return bool(rdev == 0)

    def listdir(self, directory: Inode) -> list[Entry]:
        """The entries of a directory inode, in the image's (sorted) order; "." and ".." are not stored."""
        if directory.kind != "dir":
            raise ImageFormatError(self.path, "listing something that is not a directory", "the image is damaged")
        if directory.size <= 3:  # an empty directory's listing size is 3
            return []
        if directory.size > _MAX_LISTING:
            raise ImageFormatError(self.path, f"a directory listing of {directory.size} bytes", "the image is damaged")
        raw, _, _ = self._metadata(self.superblock.directory_table_start + directory.start, directory.offset, directory.size - 3)
        entries: list[Entry] = []
        append = entries.append
        kinds = _KINDS
        unpack_entry = _DIR_ENTRY.unpack_from  # names bound once: a walk decodes a few thousand entries
        entry_size = _DIR_ENTRY.size
        position = 0
        end = len(raw)
        while position < end:
            count, block, _base = _DIR_HEADER.unpack_from(raw, position)
            position += _DIR_HEADER.size
            if count >= 256:  # mksquashfs writes at most 256 entries per header
                raise ImageFormatError(self.path, "bad directory header", "the image is damaged")
            block <<= 16
            for _ in range(count + 1):
                offset, _delta, entry_type, name_length = unpack_entry(raw, position)
                start = position + entry_size
                position = start + name_length + 1
                append(Entry(raw[start:position].decode("utf-8", errors="surrogateescape"), block | offset,
                             kinds.get(entry_type, "other")))
        return entries

    def lookup(self, path: str, *, follow_last: bool = True) -> Inode | None:
        """The inode at an absolute path inside the image, following symlinks (inroot.py: at most
        MAX_SYMLINK_HOPS in all); None when it does not exist."""

        def step(directory: Inode, name: str, last: bool) -> Inode | Link | None:
            if directory.kind != "dir":
                return None
            match = next((e for e in self.listdir(directory) if e.name == name), None)
            if match is None:
                return None
            node = self.inode(match.ref)
            return Link(node.target) if node.kind == "symlink" and (follow_last or not last) else node

        return resolve_in_root(path, self.inode(self.root_ref), step)

    # -- file data --------------------------------------------------------------------------

    def _data_block(self, position: int, word: int, wanted: int) -> bytes:
        """At least the first `wanted` bytes of the data block at `position` (fewer only if the block is shorter)."""
        size = word & ~_DATA_UNCOMPRESSED
        cached = self._data_cache.get(position)
        if cached is not None and (cached[1] or len(cached[0]) >= wanted):
            return cached[0]
        if size > self.superblock.block_size:
            raise ImageFormatError(self.path, f"data block of {size} bytes at squashfs byte {position}", "the image is damaged")
        if cached is not None:  # asked again for more of it: a fragment block that several small files share
            wanted = self.superblock.block_size  # all of it, rather than its start once more for each file
        raw = self._read(position, size)
        if word & _DATA_UNCOMPRESSED:
            data, whole = raw, True
        else:
            data = self._decompress(raw, wanted, position)
            whole = len(data) < wanted
        if len(self._data_cache) > 32:  # small files share fragment blocks; keep a few, not the image
            self._data_cache.clear()
        self._data_cache[position] = (data, whole)
        return data

    def _fragment(self, index: int) -> tuple[int, int]:
        if index >= self.superblock.fragments:
            raise ImageFormatError(self.path, f"fragment {index} of {self.superblock.fragments}", "the image is damaged")
        if self._fragment_index is None:
            blocks = (self.superblock.fragments * _FRAGMENT_ENTRY.size + METADATA_SIZE - 1) // METADATA_SIZE
            raw = self._read(self.superblock.fragment_table_start, 8 * blocks)
            self._fragment_index = struct.unpack(f"<{blocks}Q", raw)
        byte = index * _FRAGMENT_ENTRY.size
        raw, _, _ = self._metadata(self._fragment_index[byte // METADATA_SIZE], byte % METADATA_SIZE, _FRAGMENT_ENTRY.size)
        start, size, _unused = _FRAGMENT_ENTRY.unpack(raw)
        return start, size

    def read(self, inode: Inode, limit: int | None = None) -> bytes:
        """The first `limit` bytes of a regular file (all of it when None)."""
        if inode.kind != "file":
            raise ImageFormatError(self.path, "reading something that is not a regular file", "the image is damaged")
        want = inode.size if limit is None else min(inode.size, limit)
        block_size = self.superblock.block_size
        has_fragment = inode.fragment != _NO_FRAGMENT
        full_blocks = inode.size // block_size if has_fragment else (inode.size + block_size - 1) // block_size
        needed_blocks = min(full_blocks, (want + block_size - 1) // block_size)
        parts: list[bytes] = []
        got = 0
        if needed_blocks:
            raw, _, _ = self._metadata(*inode.tail_ref, 4 * needed_blocks)
            position = inode.start
            for word in struct.unpack(f"<{needed_blocks}I", raw):
                if word == 0:  # a sparse block: zeros, stored as nothing
                    parts.append(bytes(min(block_size, inode.size - got)))
                else:
                    parts.append(self._data_block(position, word, min(block_size, want - got)))
                    position += word & ~_DATA_UNCOMPRESSED
                got += len(parts[-1])
        if got < want and has_fragment:
            start, word = self._fragment(inode.fragment)
            tail = min(inode.size - full_blocks * block_size, want - got)
            block = self._data_block(start, word, inode.offset + tail)
            parts.append(block[inode.offset:inode.offset + tail])
        data = b"".join(parts)[:want]
        if len(data) != want:
            raise ImageFormatError(self.path, f"a file of {inode.size} bytes yielded {len(data)}", "the image is damaged")
        return data
