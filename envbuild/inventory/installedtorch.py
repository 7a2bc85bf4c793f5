"""The torch family installed in a Python environment of a file tree (a build's sandbox, a SIF, an overlay),
read from the files: each member's dist-info Name and Version, and its version.py as text (`cuda = '12.6'`,
`hip = None`), never imported: importing a torchvision built for another variant is what fails."""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Sequence
from typing import Protocol

from envbuild.envspec.torchfamily import (
    LABELLED_FAMILY,
    TorchBuild,
    build_from_files,
    builds_from_pins,
    family_error,
    family_mismatches,
    first_of_each,
)
from envbuild.inventory.pkgmeta import canonical_name, parse_pin
from envbuild.inventory.pyenvs import read_name_version
from envbuild.inventory.trees import DirectoryTree, Tree
from envbuild.inventory.walkguard import ReadBudget
from envbuild.shared.overlayformat import BASE_PTH


class Pinned(Protocol):
    """A package pinned to one version (a lock's LockedPackage): all a resolution's family check reads."""

    @property
    def name(self) -> str: ...

    @property
    def version(self) -> str: ...


class FamilyCheck(Protocol):
    """What the check after installing reads (the build's CheckTorchFamily action): the tree, the
    environment's prefix in it, pins given from elsewhere (NAME==VERSION) and where the error points."""

    @property
    def root(self) -> str: ...

    @property
    def prefix(self) -> str: ...

    @property
    def given(self) -> Sequence[str]: ...

    @property
    def where(self) -> str: ...

    @property
    def sys_path_file(self) -> str | None: ...


_PTH_BYTES = 64 * 1024
_VERSION_PY_BYTES = 256 * 1024


def env_site_dirs(tree: Tree, prefix: str) -> list[str]:
    """The site directories the environment at `prefix` imports from, in sys.path order as far as the files
    tell: its own lib/python*/site-packages, then those its `_envbuild_base.pth` names (a venv made from a
    base venv's Python, whose packages it uses: envbuild.builder.plan.install)."""
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


def check_locked_family(packages: Iterable[Pinned], where: str, *, then: str,
                        given: Iterable[tuple[str, str]] = ()) -> None:
    """Raise the torch family error when a locked torchvision/torchaudio is for another variant than torch.
    `given`: (name, version) of members the environment gets from elsewhere (an overlay's base), counted
    after the locked ones."""
    pins = [(package.name, package.version) for package in packages] + list(given)
    mismatches = family_mismatches(builds_from_pins(pins))
    if mismatches:
        raise family_error(mismatches, where, then=then)


def check_torch_family(action: FamilyCheck) -> str:
    """One line for the log saying what was found; an EnvbuildError naming each mismatch when the family
    does not follow torch's variant."""
    if action.sys_path_file:  # the directories the environment imports from, as its Python listed them
        tree = ReadBudget(DirectoryTree(action.root))
        listed = (tree.read(action.sys_path_file, _PTH_BYTES) or b"").decode("utf-8", errors="replace")
        builds = family_in_site_dirs(tree, [line for line in listed.splitlines() if line.startswith("/")])
    else:
        builds = env_family(DirectoryTree(action.root), action.prefix)
    builds += builds_from_pins([pin for pin in map(parse_pin, action.given) if pin])
    mismatches = family_mismatches(builds)
    if mismatches:
        raise family_error(mismatches, action.where,
                           then="build again (nothing of this environment was kept in the store)")
    first = first_of_each(builds)
    if not first:
        return "torch family: no torch, torchvision or torchaudio installed"
    return "torch family: " + ", ".join(build.describe() for build in first.values())
