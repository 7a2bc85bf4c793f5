"""Architecture fixtures without a container runtime: a SIF copy whose header says another architecture, a
recipes directory with a test system of aarch64 nodes (so that tests do not depend on a site's recipe),
and fake apptainer/debootstrap programs that record being started."""

from __future__ import annotations

import shutil
from pathlib import Path

from envbuild.sif.format import ARCH_CODES, DESCRIPTOR, HEADER, PARTITION_EXTRA
from tests.conftest import REPO

ARM_RECIPE = """\
name: armsys
description: a test system whose nodes are aarch64 (like Roihu's and JUPITER's GH200 nodes)
architecture: aarch64
node:
  gpus: 0
  cores: 8
pytorch:
  index: host
"""


def sif_with_arch(source: Path, target: Path, arch: str = "arm64") -> Path:
    """A copy of the SIF `source` whose global header and partitions say `arch` (Go name: arm64, amd64)."""
    shutil.copyfile(source, target)
    code = ARCH_CODES[arch] + b"\x00"
    with open(target, "r+b") as handle:
        raw = handle.read(HEADER.size)
        handle.seek(45)
        handle.write(code)
        fields = HEADER.unpack(raw)
        total, offset = fields[8], fields[9]
        for index in range(total):
            start = offset + index * DESCRIPTOR.size
            handle.seek(start)
            entry = DESCRIPTOR.unpack(handle.read(DESCRIPTOR.size))
            if entry[1] and entry[0] == 0x4004:  # a used partition: fs type, part type, arch in `extra`
                extra_at = start + DESCRIPTOR.size - 384
                handle.seek(extra_at + PARTITION_EXTRA.size - 3)
                handle.write(code)
    return target


def recipes_with_arm_system(directory: Path) -> Path:
    """A recipes directory: the checkout's local.yaml and armsys.yaml (aarch64 nodes)."""
    directory.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(REPO / "recipes" / "local.yaml", directory / "local.yaml")
    (directory / "armsys.yaml").write_text(ARM_RECIPE, encoding="utf-8")
    return directory


def recording_tools(directory: Path, record: Path, names: tuple[str, ...] = ("apptainer", "singularity", "debootstrap")
                    ) -> Path:
    """Programs named `names` that append their name to `record` and fail: put `directory` first on PATH.
    `--version` (how envbuild finds the runtime) answers without being recorded: it starts nothing."""
    directory.mkdir(parents=True, exist_ok=True)
    for name in names:
        tool = directory / name
        tool.write_text(f"#!/bin/sh\n[ \"$1\" = --version ] && {{ echo '{name} version 1.4.5'; exit 0; }}\n"
                        f"echo {name} \"$@\" >> {record}\nexit 1\n", encoding="utf-8")
        tool.chmod(0o755)
    return directory
