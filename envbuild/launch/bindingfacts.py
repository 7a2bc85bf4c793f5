"""What envrun reads for the binding choice of envbuild.launch.bindstyle, only when the recipe documents a newer
binding and the command could use it (envbuild.commands.launch decides): this Slurm's version and the image's
torch version.

Both are cheap on envrun's launch path after the first time: the version is `srun --version`'s line from the
user's cache (envbuild.host.runtimeversion, keyed by the srun file, so an upgrade is seen), and the image's
torch is read from the image file once (its Python environments, torch's dist-info, numactl in the image),
then cached per (image path, size, mtime) as the runscript verdict is (envbuild.launch.runscript). A sandbox
directory is read each time (a directory's mtime does not follow its files)."""

from __future__ import annotations

import os

from envbuild.launch.bindstyle import slurm_version_in

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

# Where a numactl in the image is found (torch's NUMA binding runs `numactl` from the ranks' PATH)
NUMACTL_DIRS = ("/usr/bin", "/bin", "/usr/local/bin")


def slurm_version(environ: Mapping[str, str]) -> tuple[str, str]:
    """(version, where it was read) of the srun on PATH; ("", why not) when there is none or it names none."""
    from envbuild.host.runtime import which
    from envbuild.host.runtimeversion import cached_version_line

    srun = which("srun", environ.get("PATH", os.defpath))
    if srun is None:
        return "", "no srun on PATH"
    line = cached_version_line(srun)
    version = slurm_version_in(line)
    if not version:
        return "", f"`{srun} --version` printed {line!r}" if line else f"`{srun} --version` did not answer"
    return version, f"`srun --version`, {srun}"


def image_torch(image: str, overlays: tuple[tuple[str, str], ...]) -> tuple[str, str, bool]:
    """(torch version, where, whether the image has numactl): the torch of the top overlay that has one, else
    the image's; ("", why not, ...) when none is found or the files cannot be read. Never raises: an image
    envrun cannot read is left to the container runtime."""
    version, where = "", ""
    for path, _mount in reversed(overlays):
        version, where, _ = _facts(path)
        if version:
            break
    image_version, image_where, numactl = _facts(image)
    if not version:
        version, where = image_version, image_where
    return version, where, numactl


def _facts(path: str) -> tuple[str, str, bool]:
    if os.path.isdir(path):
        return _read_torch(path)
    from envbuild.host.usercache import cached_per_file

    try:
        found: tuple[str, str, bool] = cached_per_file(path, "imagetorch-1", _read_torch, _is_facts)
    except OSError as exc:
        return "", f"{path}: {exc.strerror}", False
    return found


def _is_facts(value: object) -> bool:
    """Whether a cached value has the shape _read_torch gives."""
    return (type(value) is tuple and len(value) == 3 and type(value[0]) is str and type(value[1]) is str
            and type(value[2]) is bool)


def _read_torch(path: str) -> tuple[str, str, bool]:
    from envbuild.inventory.image import open_image
    from envbuild.inventory.installedtorch import env_family
    from envbuild.inventory.pyenvs import find_environments
    from envbuild.shared.errors import EnvbuildError

    name = os.path.basename(path)
    try:
        with open_image(path) as opened:
            tree = opened.tree
            numactl = any("numactl" in (tree.children(directory) or {}) for directory in NUMACTL_DIRS)
            for environment in find_environments(tree):
                for build in env_family(tree, environment.prefix):
                    if build.canonical == "torch":
                        return build.version, f"{environment.prefix} in {name}", numactl
            return "", f"no torch found in {name}'s Python environments", numactl
    except (EnvbuildError, OSError, ValueError) as exc:
        return "", f"{name} could not be read ({type(exc).__name__})", False
