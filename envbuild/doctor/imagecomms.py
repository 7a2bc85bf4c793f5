"""What an image carries that decides how its training talks to GPUs and other nodes, read from the file
(no container started): the NCCL/RCCL network plugin, libfabric and whether it has the CXI provider,
libibverbs and its providers, the GPU runtime libraries, torch and the build it is.

Read through the inventory's `Tree` view, so a SIF, an overlay, a sandbox directory and a test's stand-in
tree (`ListedTree`) are read alike."""

from __future__ import annotations

import fnmatch
import posixpath
from dataclasses import dataclass, field

from envbuild.envspec.torchfamily import TorchBuild
from envbuild.inventory.installedtorch import env_family
from envbuild.inventory.pyenvs import Inventory
from envbuild.inventory.trees import Tree

# Library directories of the distributions and of the stacks sites install under /opt (/opt/rocm-6.2/lib,
# /opt/aws-ofi-rccl/lib, /opt/cray/libfabric/1.15/lib64); two levels below /opt cover them all.
SYSTEM_LIB_DIRS = ("/lib64", "/usr/lib", "/usr/lib64", "/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu",
                   "/usr/local/lib", "/usr/local/lib64")
OPT_DEPTH = 3
# Inside a Python environment: torch's bundled libraries and NVIDIA's pip-packaged ones.
SITE_LIB_DIRS = ("torch/lib", "nvidia/nccl/lib", "nvidia/cuda_runtime/lib")
LIBRARY_KINDS = {
    "net_plugin": ("librccl-net*.so*", "libnccl-net*.so*"),
    "libfabric": ("libfabric.so*",),
    "libcxi": ("libcxi.so*",),
    "libibverbs": ("libibverbs.so*",),
    "ibverbs_provider": ("libmlx5.so*", "lib*-rdmav*.so"),
    "hip": ("libamdhip64.so*",),
    "cudart": ("libcudart.so*",),
    "rccl": ("librccl.so*",),
    "nccl": ("libnccl.so*",),
}
# HPE's CXI provider inside libfabric.so: its functions are named cxip_* (libfabric prov/cxi).
CXI_MARKER = b"cxip_"
LIBFABRIC_READ_LIMIT = 64 * 1024 * 1024


@dataclass
class ImageFacts:
    path: str
    libraries: dict[str, list[str]] = field(default_factory=dict)  # kind -> paths in the image
    libfabric_cxi: bool | None = None  # None: no libfabric in the image
    torch_env: str = ""  # the environment whose torch Python imports (the first with torch)
    family: list[TorchBuild] = field(default_factory=list)  # torch, torchvision, torchaudio there, as installed
    runscript: str | None = None  # the image's /.singularity.d/runscript, when it has one

    def has(self, kind: str) -> bool:
        return bool(self.libraries.get(kind))

    @property
    def torch(self) -> TorchBuild | None:
        return next((build for build in self.family if build.canonical == "torch"), None)


def _lib_dirs(tree: Tree, inventory: Inventory) -> list[str]:
    dirs = [d for d in SYSTEM_LIB_DIRS if tree.children(d) is not None]
    frontier = ["/opt"]
    for _depth in range(OPT_DEPTH):
        following = []
        for parent in frontier:
            for name, kind in (tree.children(parent) or {}).items():
                path = posixpath.join(parent, name)
                if kind != "dir":
                    continue
                if name in ("lib", "lib64"):
                    dirs.append(path)
                else:
                    following.append(path)
        frontier = following
    for env in inventory.environments:
        for site in env.site_dirs:
            dirs += [posixpath.join(site, sub) for sub in SITE_LIB_DIRS if tree.children(posixpath.join(site, sub))]
    # providers live one level down: libibverbs/libmlx5-rdmav34.so, libfabric/libcxi-fi.so
    dirs += [posixpath.join(d, sub) for d in list(dirs) for sub in ("libibverbs", "libfabric")
             if tree.children(posixpath.join(d, sub)) is not None]
    return list(dict.fromkeys(dirs))


def find_libraries(tree: Tree, inventory: Inventory, extra_plugins: tuple[str, ...] = ()) -> dict[str, list[str]]:
    kinds = {**LIBRARY_KINDS, "net_plugin": tuple(dict.fromkeys((*LIBRARY_KINDS["net_plugin"], *extra_plugins)))}
    found: dict[str, list[str]] = {kind: [] for kind in kinds}
    for directory in _lib_dirs(tree, inventory):
        for name in sorted(tree.children(directory) or {}):
            for kind, patterns in kinds.items():
                if any(fnmatch.fnmatch(name, pattern) for pattern in patterns):
                    found[kind].append(posixpath.join(directory, name))
    return found


def torch_family(tree: Tree, inventory: Inventory) -> tuple[str, list[TorchBuild]]:
    """The first environment that has torch (else the first with any of its family: an overlay adding
    torchvision to a base's torch), and that family as installed (envbuild.inventory.installedtorch: dist-info
    versions and version.py read as text)."""
    families = [(env.prefix, env_family(tree, env.prefix)) for env in inventory.environments]
    with_torch = [(prefix, family) for prefix, family in families if any(b.canonical == "torch" for b in family)]
    return next(iter(with_torch or [(p, f) for p, f in families if f]), ("", []))


def image_facts(path: str, tree: Tree, inventory: Inventory, extra_plugins: tuple[str, ...] = ()) -> ImageFacts:
    libraries = find_libraries(tree, inventory, extra_plugins)
    cxi: bool | None = None
    if libraries["libfabric"]:
        # a provider built as its own library (lib/libfabric/libcxi-fi.so), else built into libfabric.so
        in_provider_dir = [p for p in libraries["libfabric"] if posixpath.basename(posixpath.dirname(p)) == "libfabric"]
        cxi = any("cxi" in posixpath.basename(p) for p in in_provider_dir)
        for library in (p for p in libraries["libfabric"] if p not in in_provider_dir):
            if cxi:
                break
            cxi = CXI_MARKER in (tree.read(library, LIBFABRIC_READ_LIMIT) or b"")
    runscript = tree.read("/.singularity.d/runscript", 64 * 1024)
    torch_env, family = torch_family(tree, inventory)
    return ImageFacts(path=path, libraries=libraries, libfabric_cxi=cxi, torch_env=torch_env, family=family,
                      runscript=runscript.decode("utf-8", "replace") if runscript else None)
