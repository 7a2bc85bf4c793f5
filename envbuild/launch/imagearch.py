"""envrun refuses an image of another architecture before the container starts, instead of the container's
`exec format error` (or qemu's slowness where binfmt emulation is installed).

Reads the SIF's 128-byte global header (envbuild.sif.format.read_sif_arch): cheap on every launch.
Sandbox directories and files that are not SIF are not checked, nor are overlays (.sqsh): a squashfs carries
no architecture, and a venv overlay's compiled extensions were built against its base, which is checked.
"""

from __future__ import annotations

from envbuild.errors import UsageError
from envbuild.host.arch import host_arch, normalise_arch, system_arch
from envbuild.sif.format import read_sif_arch

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def check_image_arch(image: str, recipe: Any, *, under_srun: bool, host: str | None = None) -> None:
    """Refuse `image` when its architecture is not the one it will run on: this machine's, or under srun the
    system's nodes' (the recipe's `architecture:`; a login node may differ from the compute nodes)."""
    raw = read_sif_arch(image)
    found = normalise_arch(raw or "")
    if not found:
        return  # not a SIF, or a header with no architecture: nothing to compare
    here = host or host_arch()
    if under_srun:
        wanted, where = system_arch(recipe, here), f"system {recipe.name}'s nodes"
        if getattr(recipe, "node", None) is not None:
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
