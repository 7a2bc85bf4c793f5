"""The SIF global header's magic and architecture codes, and reading an image's architecture from them.

Apart from envbuild.inventory.sifformat (which re-exports these) because envrun reads an image's architecture
on every launch: this module imports nothing, not even struct (the header's fields are at fixed offsets).
"""

from __future__ import annotations

MAGIC = b"SIF_MAGIC\x00"
_HEADER_SIZE = 128
_MAGIC_AT, _ARCH_AT = 32, 45  # after the 32-byte launch script; arch after magic [10] and version [3]
# The header's and a partition's arch codes, with Go's GOARCH names.
ARCHES = {
    "00": "unknown", "01": "386", "02": "amd64", "03": "arm", "04": "arm64", "05": "ppc64", "06": "ppc64le",
    "07": "mips", "08": "mipsle", "09": "mips64", "10": "mips64le", "11": "s390x", "12": "riscv64", "13": "loong64",
}


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
