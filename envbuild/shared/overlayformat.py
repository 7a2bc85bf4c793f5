"""What a venv overlay (`NAME.sqsh`) is made of: the facts that the build writes and that
envrun, the wrappers and the inventory read. A shared leaf: it imports nothing of envbuild.

An overlay is a squashfs whose root is a Python venv (made with `--system-site-packages` by the base
image's own Python). It is mounted read-only over a base image the way LUMI documents it:

    apptainer exec --bind env.sqsh:/user-software:image-src=/ base.sif ...

Inside the squashfs, next to the venv's bin/ and lib/, `.envbuild/overlay.json` records how it was
made (the RECORD keys below), with the spec and lock it was built from.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing stays off envrun's start-up path
if TYPE_CHECKING:
    from typing import Any

# Where LUMI's documentation and EasyBuild modules mount a user's squashed venv.
DEFAULT_MOUNT = "/user-software"
# Relative to the overlay's root (so at run time: <mount>/.envbuild/overlay.json).
RECORD_DIR = ".envbuild"
RECORD_FILE = f"{RECORD_DIR}/overlay.json"
SPEC_FILE = f"{RECORD_DIR}/spec.yaml"
LOCK_FILE = f"{RECORD_DIR}/spec.lock"
# A .pth file in the venv's site-packages naming the base environment's site directories: a venv made
# from a venv's Python (LAIF's /opt/venv, envbuild's own) sees only the underlying interpreter's
# system site through --system-site-packages, not the base venv's packages.
BASE_PTH = "_envbuild_base.pth"
OVERLAY_RECORD_FORMAT = 1
SQUASHFS_MAGIC = b"hsqs"

# The record's keys (overlay.json), as written by envbuild.builder and read by envrun and the inventory:
#   record_format  OVERLAY_RECORD_FORMAT
#   kind           "overlay"
#   envbuild_version, built_at
#   name           the spec's name
#   spec           {"name", "sha256"};  lock: {"sha256", "python"} or null
#   system         recipe name
#   mount          absolute mount point inside the container (DEFAULT_MOUNT unless the spec says)
#   key            the overlay's store key (a no-op rebuild compares it)
#   base           {"ref": spec's base, "path": host path at build time, "digest": "sha256:<hex>" of the .sif,
#                   "sif_id": the SIF header's image UUID, "size": bytes}
#   python         {"path": the base's interpreter, "version": "3.12.3", "abi": "cpython-312-x86_64-linux-gnu",
#                   "env": the base environment's prefix, "activation": "WITH_CONDA" | "", "why": how it was chosen}
#   requirements   the spec's requirements, in order
#   packages       {"kept": ["name==version" provided by the base], "added": ["name==version" in the overlay]}
#   installer      {"name": "pip", "version": ...}
RECORD_KEYS = ("record_format", "kind", "name", "mount", "key", "base", "python", "packages")


def is_squashfs_file(head: bytes) -> bool:
    """True when `head` (a file's first bytes) starts a bare squashfs file system (not a SIF)."""
    return head[:4] == SQUASHFS_MAGIC


def check_record(record: object, where: str) -> dict[str, Any]:
    """The record if it has every key envrun and the inventory rely on; ValueError naming what is missing."""
    if not isinstance(record, dict):
        raise ValueError(f"{where}: {RECORD_FILE} is not a JSON object")
    missing = [key for key in RECORD_KEYS if key not in record]
    if missing:
        raise ValueError(f"{where}: {RECORD_FILE} lacks {', '.join(missing)}")
    if record.get("kind") != "overlay":
        raise ValueError(f"{where}: {RECORD_FILE} describes a {record.get('kind')!r}, not an overlay")
    if not isinstance(record.get("mount"), str) or not record["mount"].startswith("/"):
        raise ValueError(f"{where}: {RECORD_FILE}: mount must be an absolute path")
    return record
