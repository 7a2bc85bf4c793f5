"""The torch family installed in a Python environment of a file tree (a build's sandbox, a SIF, an overlay),
read from the files: each member's dist-info Name and Version, and its version.py as text (`cuda = '12.6'`,
`hip = None`), never imported: importing a torchvision built for another variant is what fails."""

from __future__ import annotations

import posixpath

from envbuild.inventory.pkgmeta import canonical_name
from envbuild.inventory.pyenvs import read_name_version
from envbuild.inventory.trees import Tree
from envbuild.inventory.walkguard import ReadBudget
from envbuild.overlayformat import BASE_PTH
from envbuild.spec.torchfamily import LABELLED_FAMILY, TorchBuild, build_from_files

_PTH_BYTES = 64 * 1024
_VERSION_PY_BYTES = 256 * 1024


def env_site_dirs(tree: Tree, prefix: str) -> list[str]:
    """The site directories the environment at `prefix` imports from, in sys.path order as far as the files
    tell: its own lib/python*/site-packages, then those its `_envbuild_base.pth` names (a venv made from a
    base venv's Python, whose packages it uses: envbuild.build.install)."""
    prefix = posixpath.normpath("/" + prefix.strip("/"))
    lib = posixpath.join(prefix, "lib")
    own = [posixpath.join(lib, name, "site-packages") for name, kind in sorted((tree.children(lib) or {}).items())
           if kind == "dir" and name.startswith("python")]
    own = [site for site in own if tree.children(site) is not None]
    found = list(own)
    for site in own:
        text = (tree.read(posixpath.join(site, BASE_PTH), _PTH_BYTES) or b"").decode("utf-8", errors="replace")
        for line in (raw.strip() for raw in text.splitlines()):
            # site.py's rules: blank and "#" lines are skipped, "import" lines are code.
            if line.startswith("/") and posixpath.normpath(line) not in found:
                found.append(posixpath.normpath(line))
    return found


def family_in_site_dirs(tree: Tree, site_dirs: list[str]) -> list[TorchBuild]:
    """torch, torchvision and torchaudio as installed in `site_dirs`, the first of each name first (the one
    imported); none when the tree holds none."""
    builds: list[TorchBuild] = []
    for site in site_dirs:
        for entry, kind in sorted((tree.children(site) or {}).items()):
            if kind != "dir" or not entry.endswith(".dist-info"):
                continue
            name = canonical_name(entry[: -len(".dist-info")].split("-", 1)[0])
            if name not in LABELLED_FAMILY:
                continue
            parsed = read_name_version(tree, f"{site}/{entry}/METADATA")
            if parsed is None:
                continue
            # The import package is named like the distribution (torch/, torchvision/, torchaudio/).
            version_py = tree.read(f"{site}/{name.replace('-', '_')}/version.py", _VERSION_PY_BYTES)
            builds.append(build_from_files(parsed[0], parsed[1], version_py.decode("utf-8", errors="replace") if version_py else None))
    return builds


def env_family(tree: Tree, prefix: str) -> list[TorchBuild]:
    """The torch family that the environment at `prefix` imports (see env_site_dirs), within walkguard's read
    budget (a crafted image can hold thousands of torch-N.dist-info)."""
    tree = ReadBudget(tree)
    return family_in_site_dirs(tree, env_site_dirs(tree, prefix))
