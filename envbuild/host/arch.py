"""CPU architectures: this machine's, and the one name envbuild uses for each (`uname -m`'s: x86_64, aarch64).

Images carry other spellings: the SIF header and Go say amd64/arm64, Docker too, and ELF files a machine
number. Everything is normalised here, so that a recipe's `architecture:`, a SIF header, a program in a
sandbox and the host compare as equals. Light on purpose (os and struct only): envrun checks an image's
architecture on every launch.
"""

from __future__ import annotations

import os
import stat

from envbuild.shared.errors import UsageError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Protocol

    class SystemFacts(Protocol):
        """What the architecture checks read of a system recipe: envbuild.recipes.protocols.SystemRecipe has
        it (host/ sits below recipes/ in the package order, so it names only this much)."""

        @property
        def name(self) -> str: ...
        @property
        def architecture(self) -> str: ...
        @property
        def node(self) -> object: ...  # None for a `node: host` recipe
        def cite(self, field: str) -> str: ...

# Go's / Docker's / other tools' names -> uname -m's. Names not listed are kept as they are.
_ALIASES = {"amd64": "x86_64", "x86-64": "x86_64", "x64": "x86_64", "arm64": "aarch64", "arm64v8": "aarch64",
            "aarch64_be": "aarch64_be", "386": "i686", "i386": "i686", "arm": "armv7l", "ppc64el": "ppc64le"}

# ELF e_machine -> uname -m's name (EM_386, EM_X86_64, EM_ARM, EM_AARCH64, EM_S390, EM_RISCV, EM_PPC64).
_ELF_MACHINES = {3: "i686", 62: "x86_64", 40: "armv7l", 183: "aarch64", 22: "s390x", 243: "riscv64"}
_EM_PPC64 = 21

# Programs every root file system has, in the order apptainer itself looks at them.
_ROOTFS_PROGRAMS = ("bin/sh", "usr/bin/sh", "bin/busybox", "usr/bin/env")


def normalise_arch(name: str) -> str:
    """'amd64' -> 'x86_64', 'arm64' -> 'aarch64', 'x86_64' -> 'x86_64'; '' and 'unknown' stay ''."""
    text = name.strip().lower()
    if text in ("", "unknown"):
        return ""
    return _ALIASES.get(text, text)


def host_arch() -> str:
    """This machine's architecture, normalised (uname -m)."""
    return normalise_arch(os.uname().machine)


def elf_arch(head: bytes) -> str:
    """The architecture of an ELF file from its first 20 bytes; '' when it is not ELF."""
    if len(head) < 20 or head[:4] != b"\x7fELF":
        return ""
    little = head[5] == 1
    machine = int.from_bytes(head[18:20], "little" if little else "big")
    if machine == _EM_PPC64:
        return "ppc64le" if little else "ppc64"
    return _ELF_MACHINES.get(machine, f"elf-machine-{machine}")


def programs_arch(read: Callable[[str], bytes | None]) -> str:
    """The architecture of a root file system's programs, from `read(path)` (the first 20 bytes of the file at
    that path in it, None when there is none); '' when none is found."""
    for candidate in _ROOTFS_PROGRAMS:
        found = elf_arch(read("/" + candidate) or b"")
        if found:
            return found
    return ""


def rootfs_arch(root: str) -> str:
    """The architecture of the programs in an unpacked root file system (a sandbox); '' when none is found.
    Only regular files are read: a FIFO named bin/sh must not hang the caller (O_NONBLOCK, then fstat)."""

    def read(path: str) -> bytes | None:
        try:
            fd = os.open(os.path.join(root, path.lstrip("/")), os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            return os.read(fd, 20) if stat.S_ISREG(os.fstat(fd).st_mode) else None
        except OSError:
            return None
        finally:
            os.close(fd)

    return programs_arch(read)


def go_arch(name: str) -> str:
    """The Go/SIF name of an architecture ('x86_64' -> 'amd64'), as SIF headers and `apptainer --arch` write it."""
    normal = normalise_arch(name)
    for alias in ("amd64", "arm64", "386", "arm", "ppc64le", "s390x", "riscv64"):
        if _ALIASES.get(alias, alias) == normal:
            return alias
    return normal


def system_arch(recipe: SystemFacts, host: str) -> str:
    """The architecture a system's images must have: its recipe's `architecture:`, or for a `node: host` recipe
    (no site facts, e.g. local: any machine) the machine envbuild or envrun runs on."""
    if recipe.node is None and host:
        return host
    return recipe.architecture


def check_image_arch(image: str, raw: str | None, recipe: SystemFacts, *, under_srun: bool, host: str | None = None) -> None:
    """Refuse `image`, whose SIF header names the architecture `raw` (envbuild.sif.format.read_sif_arch: 128
    bytes, cheap on every launch), when that is not the one it will run on: this machine's, or under srun the
    system's nodes' (the recipe's `architecture:`; a login node may differ from the compute nodes). envrun asks
    before the container starts, instead of the container's `exec format error` (or qemu's slowness where
    binfmt emulation is installed). A sandbox directory or a file that is not a SIF (`raw` None) is not
    checked, nor are overlays: a squashfs carries no architecture, and a venv overlay's compiled extensions
    were built against its base, which is checked."""
    found = normalise_arch(raw or "")
    if not found:
        return  # not a SIF, or a header with no architecture: nothing to compare
    here = host or host_arch()
    if under_srun:
        wanted, where = system_arch(recipe, here), f"system {recipe.name}'s nodes"
        if recipe.node is not None:
            where += f" ({recipe.cite('architecture')})"
    else:
        wanted, where = here, "this machine"
    if found == wanted:
        return
    raise UsageError(
        f"image {image} is {found} (its SIF header says {raw}), but {where} {'run' if under_srun else 'is'} {wanted}: "
        f"its programs cannot run here (the container would fail with `exec format error`)",
        f"use an image built for {wanted}: build the spec on an {wanted} machine (the system's login node) with a base "
        f"of that architecture, or pick the system the image is for (--system NAME)")
