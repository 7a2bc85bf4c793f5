"""envbuild.host.arch: one name per architecture, from uname, SIF/Go names and ELF headers."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

from envbuild.host.arch import elf_arch, go_arch, host_arch, normalise_arch, rootfs_arch, system_arch


@pytest.mark.parametrize(("name", "normal"), [("x86_64", "x86_64"), ("amd64", "x86_64"), ("AMD64", "x86_64"),
                                              ("aarch64", "aarch64"), ("arm64", "aarch64"), ("ppc64le", "ppc64le"),
                                              ("unknown", ""), ("", "")])
def test_normalise(name: str, normal: str) -> None:
    assert normalise_arch(name) == normal


def test_go_names_round_trip() -> None:
    assert (go_arch("x86_64"), go_arch("aarch64"), go_arch("arm64")) == ("amd64", "arm64", "arm64")


def test_host_is_unames() -> None:
    assert host_arch() == normalise_arch(os.uname().machine)


def _elf(machine: int) -> bytes:
    return b"\x7fELF\x02\x01\x01" + bytes(9) + struct.pack("<HH", 2, machine)


def test_elf_and_rootfs(tmp_path: Path) -> None:
    assert elf_arch(_elf(183)) == "aarch64" and elf_arch(_elf(62)) == "x86_64"
    assert elf_arch(b"#!/bin/sh\n" + bytes(20)) == ""
    assert rootfs_arch(str(tmp_path)) == ""  # no programs: unknown
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "sh").write_bytes(_elf(183) + bytes(100))
    assert rootfs_arch(str(tmp_path)) == "aarch64"


class _Recipe:
    def __init__(self, node: object, architecture: str) -> None:
        self.node, self.architecture = node, architecture


def test_system_arch_is_the_recipes_or_for_node_host_the_machines() -> None:
    assert system_arch(_Recipe({"cores": 8}, "aarch64"), "x86_64") == "aarch64"
    assert system_arch(_Recipe(None, "x86_64"), "aarch64") == "aarch64"  # `node: host`: any machine (local)
