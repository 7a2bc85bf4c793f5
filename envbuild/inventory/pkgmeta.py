"""Name and version of one installed package, from the files that record it (pure functions).

- pip: the core metadata of a distribution (`*.dist-info/METADATA`, `*.egg-info/PKG-INFO` or a
  `*.egg-info` file), an e-mail style header that ends at the first blank line.
- conda: `conda-meta/<name>-<version>-<build>.json`; conda names the file from the record, and names
  may hold dashes while versions and builds may not, so the last two dashes split it.

Light at import (no json, no re): `envbuild packages` answering from its index sorts by canonical_name and
loads nothing else of the reader.
"""

from __future__ import annotations

_SEPARATORS_TO_DASH = str.maketrans("_.", "--")

# Name and Version are the first fields every build backend writes; 2 KiB holds them with room to spare. Kept
# small because a small file sits inside a shared fragment block, which decompresses from its start up to the
# last byte asked for.
HEAD_BYTES = 2 * 1024
# When a header is longer than that (many Requires-Dist lines before Version: seen in old setuptools)
# the reader asks again for this much.
LONG_HEAD_BYTES = 512 * 1024


def parse_core_metadata(data: bytes) -> tuple[str, str] | None:
    """(Name, Version) from the header of a core metadata file; None when either is missing."""
    name = version = None
    for raw in data.split(b"\n"):
        line = raw.rstrip(b"\r")
        if not line:
            break  # end of the header; the long description follows
        if line[:1] in (b" ", b"\t"):
            continue  # continuation of a folded field
        key, sep, value = line.partition(b":")
        if not sep:
            continue
        key = key.strip().lower()
        if key == b"name" and name is None:
            name = value.strip().decode("utf-8", errors="replace")
        elif key == b"version" and version is None:
            version = value.strip().decode("utf-8", errors="replace")
        if name and version:
            return name, version
    return None


def header_is_complete(data: bytes) -> bool:
    """Whether `data` holds the whole header (a blank line was reached)."""
    return b"\n\n" in data or b"\r\n\r\n" in data


def parse_conda_meta_filename(filename: str) -> tuple[str, str] | None:
    """`pytorch-2.3.0-py3.10_rocm5.7_0.json` -> ("pytorch", "2.3.0")."""
    if not filename.endswith(".json"):
        return None
    parts = filename[: -len(".json")].rsplit("-", 2)
    if len(parts) != 3 or not all(parts):
        return None
    return parts[0], parts[1]


def parse_conda_meta_json(data: bytes) -> tuple[str, str] | None:
    """(name, version) from a conda-meta record, for files not named the way conda names them."""
    import json  # only for a record conda did not name: rare

    try:
        record = json.loads(data)
    except ValueError:
        return None
    if not isinstance(record, dict):
        return None
    name, version = record.get("name"), record.get("version")
    if isinstance(name, str) and isinstance(version, str) and name and version:
        return name, version
    return None


def canonical_name(name: str) -> str:
    """PEP 503 normalised name, under which `Foo_Bar`, `foo-bar` and `foo.bar` are one package."""
    # Each run of "-", "_" and "." becomes one "-" (PEP 503's re.sub(r"[-_.]+", "-", name)), without re.
    dashed = name.translate(_SEPARATORS_TO_DASH)
    while "--" in dashed:
        dashed = dashed.replace("--", "-")
    return dashed.lower()


def parse_pin(line: str) -> tuple[str, str] | None:
    """(canonical name, version) from a `name==version` line of a requirements file or a freeze list;
    None for a comment or any other requirement. A trailing `--hash ...` and line continuation are ignored."""
    head = line.split("--hash", 1)[0].strip().rstrip("\\").strip()
    if "==" not in head or head.startswith("#"):
        return None
    name, version = head.split("==", 1)
    return canonical_name(name.strip()), version.strip()
