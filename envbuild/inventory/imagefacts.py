"""Everything `inspect` and `diff` report about one image, read from the file: SIF objects and the
partition's compression, labels, start scripts, runscript, the embedded envbuild spec/record/lock,
and the Python environments. The start scripts' variables are read without running them: `NAME=value` and
`export NAME=value` lines, in the order the runtime sources the scripts, values kept as written (`$PATH` is
not expanded), which is what comparing two images needs."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
from dataclasses import dataclass, field
from typing import Any

from envbuild.inventory.image import OpenImage, guarded, image_arch, inventory_of, open_image
from envbuild.inventory.pyenvs import Inventory
from envbuild.inventory.trees import Tree
from envbuild.inventory.walkguard import MAX_FACTS_READ_BYTES, ReadBudget
from envbuild.shared.overlayformat import LOCK_FILE, SPEC_FILE
from envbuild.sif.reader import read_object

_ASSIGNMENT = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*?)\s*$")
# The scripts apptainer writes into every image; `inspect` lists them without printing their text.
STOCK_SCRIPTS = frozenset({"01-base.sh", "94-appsbase.sh", "95-apps.sh", "99-base.sh", "99-runtimevars.sh"})


def _unquote(value: str) -> str:
    try:
        words = shlex.split(value, comments=True)
    except ValueError:
        return value
    return words[0] if len(words) == 1 else value


def exported_variables(scripts: list[tuple[str, str]]) -> dict[str, str]:
    """NAME -> value from (script name, text) pairs; a later script overrides an earlier one, as at run
    time. apptainer's own scripts are left out: they set the runtime's plumbing (PS1, SCIF_*, the
    user's PATH), the same in every image of an apptainer version, and would only blur a comparison."""
    variables: dict[str, str] = {}
    for name, text in sorted(scripts):
        if name in STOCK_SCRIPTS:
            continue
        for line in text.splitlines():
            match = _ASSIGNMENT.match(line)
            if match:
                variables[match.group(1)] = _unquote(match.group(2))
    return variables


TEXT_LIMIT = 1024 * 1024  # scripts and specs are small; a bigger file is shown cut
ENV_DIR = "/.singularity.d/env"
FILES = {
    "labels": "/.singularity.d/labels.json",
    "runscript": "/.singularity.d/runscript",
    "deffile": "/.singularity.d/Singularity",
    "spec": "/.envbuild/spec.yaml",
    "build_record": "/.envbuild/build.json",
    "lock": "/.envbuild/lock",
    "pip_freeze": "/.envbuild/pip-freeze.txt",
}


@dataclass
class ImageFacts:
    path: str
    file_size: int = 0
    sif: dict[str, Any] | None = None  # header fields; None for a sandbox directory
    objects: list[dict[str, Any]] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)
    env_scripts: dict[str, str] = field(default_factory=dict)
    environment: dict[str, str] = field(default_factory=dict)
    runscript: str | None = None
    deffile: str | None = None
    envbuild: dict[str, Any] = field(default_factory=dict)
    inventory: Inventory = field(default_factory=Inventory)
    squashfs: dict[str, Any] | None = None  # a bare squashfs file (an overlay): its superblock's facts
    overlay: dict[str, Any] | None = None  # an envbuild overlay's record (.envbuild/overlay.json)
    # x86_64, aarch64 (normalised; the SIF header's own name is in sif["arch"]); "" for an overlay or unknown
    architecture: str = ""


def _text(tree: Tree, path: str) -> str | None:
    data = tree.read(path, TEXT_LIMIT)
    return None if data is None else data.decode("utf-8", errors="replace")


def _partition_details(image: OpenImage) -> dict[str, Any]:
    if image.fs is None:
        return {}
    block = image.fs.superblock
    return {"version": f"{block.major}.{block.minor}", "compression": block.compression,
            "block_size": block.block_size, "inodes": block.inodes,
            "bytes_used": block.bytes_used, "created_at": block.mkfs_time}


def _sif_labels(image: OpenImage) -> dict[str, str]:
    """Labels from the metadata object apptainer writes into the SIF, for images without labels.json."""
    if image.layout is None:
        return {}
    for obj in image.layout.objects:
        if obj.data_type == "generic-json":
            with contextlib.suppress(ValueError, AttributeError, TypeError):
                labels = json.loads(read_object(image.layout, obj))["data"]["attributes"]["labels"]
                if isinstance(labels, dict):
                    return {str(k): str(v) for k, v in labels.items()}
    return {}


def _read_facts(image: OpenImage, inventory: Inventory | None) -> ImageFacts:
    tree = ReadBudget(image.tree, MAX_FACTS_READ_BYTES)
    facts = ImageFacts(path=image.path, inventory=inventory if inventory is not None else inventory_of(image),
                       architecture=image_arch(image.path))
    files = FILES
    if image.bare_squashfs:
        facts.file_size = os.path.getsize(image.path)
        facts.squashfs = _partition_details(image)
    if image.overlay is not None:
        facts.overlay = image.overlay
        mount = facts.overlay["mount"].rstrip("/")
        files = {**FILES, "spec": f"{mount}/{SPEC_FILE}", "lock": f"{mount}/{LOCK_FILE}"}
    if image.layout is not None:
        header = image.layout.header
        facts.file_size = image.layout.file_size
        facts.sif = {"version": header.version, "arch": header.arch, "id": header.image_id,
                     "created_at": header.created_at, "modified_at": header.modified_at}
        for obj in image.layout.objects:
            entry: dict[str, Any] = {"id": obj.id, "type": obj.data_type, "offset": obj.offset, "size": obj.size}
            if obj.name:
                entry["name"] = obj.name
            if obj.data_type == "partition":
                entry.update(fs_type=obj.fs_type, part_type=obj.part_type, arch=obj.arch)
                if obj == image.partition:
                    entry.update(_partition_details(image))
            facts.objects.append(entry)
    labels_text = _text(tree, FILES["labels"])
    labels: Any = None
    if labels_text:
        with contextlib.suppress(ValueError):
            labels = json.loads(labels_text)
    facts.labels = {str(k): str(v) for k, v in labels.items()} if isinstance(labels, dict) else _sif_labels(image)
    for name, kind in sorted((tree.children(ENV_DIR) or {}).items()):
        if name.endswith(".sh") and kind in ("file", "symlink"):
            facts.env_scripts[name] = _text(tree, f"{ENV_DIR}/{name}") or ""
    facts.environment = exported_variables(list(facts.env_scripts.items()))
    facts.runscript = _text(tree, FILES["runscript"])
    facts.deffile = _text(tree, FILES["deffile"])
    record_text = None if image.overlay is not None else _text(tree, FILES["build_record"])
    record: Any = None
    if record_text:
        with contextlib.suppress(ValueError):
            record = json.loads(record_text)
    freeze = _text(tree, FILES["pip_freeze"])
    facts.envbuild = {
        "spec": _text(tree, files["spec"]),
        "build_record": record,
        "lock": _text(tree, files["lock"]),
        "pip_freeze_lines": None if freeze is None else len([line for line in freeze.splitlines() if line.strip()]),
    }
    return facts


def read_image_facts(path: str, inventory: Inventory | None = None) -> ImageFacts:
    """All facts about the image at `path`; pass `inventory` when a cache already has it."""
    with open_image(path) as image:
        return guarded(path, lambda: _read_facts(image, inventory))
