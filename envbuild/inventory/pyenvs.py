"""Find the Python environments in an image's file tree and list the packages installed in each.

An environment is a prefix directory:
  venv    has pyvenv.cfg                                    (/opt/envbuild/venv)
  conda   has conda-meta/                                   (/opt/miniconda3, /opt/miniconda3/envs/pytorch, /opt/cotainr/conda)
  system  has lib/pythonX[.Y]/{site,dist}-packages and is neither   (/usr, /usr/local)
Its pip distributions are the `*.dist-info` / `*.egg-info` entries of those site directories (what
`pip list` shows, conda-installed Python packages included); its conda packages are conda-meta/*.json.

The walk reads directory listings only and skips what cannot hold an environment (kernel file systems,
documentation, locales, the standard library, conda's package cache, package directories inside
site-packages), which keeps it to a few hundred directories on a multi-GiB image.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field

from envbuild.inventory.overlayvenv import OverlayVenv
from envbuild.inventory.pkgmeta import (
    HEAD_BYTES,
    LONG_HEAD_BYTES,
    header_is_complete,
    parse_conda_meta_filename,
    parse_conda_meta_json,
    parse_core_metadata,
)
from envbuild.inventory.trees import Tree
from envbuild.inventory.walkguard import ReadBudget, WalkGuard

SITE_DIR_NAMES = ("site-packages", "dist-packages")
SKIP_AT_ROOT = frozenset({"proc", "sys", "dev", "run", "tmp", "boot", "lost+found", ".singularity.d", ".envbuild"})
SKIP_ANYWHERE = frozenset({"__pycache__", ".git", "node_modules", "locale", "man", "doc", "zoneinfo", "terminfo",
                           "include", "site-packages.orig"})
# Inside a prefix (a directory with lib/ or bin/): data and headers, never an environment.
SKIP_IN_PREFIX = frozenset({"share", "include", "etc", "ssl", "compiler_compat", "x86_64-conda-linux-gnu"})
# Inside a conda installation: the package cache holds unpacked packages that are not installed.
SKIP_IN_CONDA = frozenset({"pkgs", "conda-bld", "conda-meta"})
MAX_DEPTH = 12
# A conda record lists every file of its package: pytorch's is a few MiB. Read whole only when its file name
# does not say name and version, which conda's own never lack.
CONDA_RECORD_BYTES = 32 << 20


@dataclass(frozen=True)
class Environment:
    prefix: str
    kind: str  # venv | conda | system
    site_dirs: tuple[str, ...] = ()
    python: str = ""  # "3.11" from lib/python3.11; "" when only lib/python3 or none


@dataclass(frozen=True, order=True)
class Package:
    environment: str  # the prefix
    name: str
    version: str
    source: str  # pip | conda


@dataclass
class Problem:
    """Something unreadable inside an image that does not stop the listing (a dist-info without METADATA)."""

    path: str
    message: str


@dataclass
class Inventory:
    environments: list[Environment] = field(default_factory=list)
    packages: list[Package] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    overlay: OverlayVenv | None = None  # set when the file is a venv overlay


@dataclass
class _Found:
    venv: bool = False
    conda: bool = False
    site_dirs: list[str] = field(default_factory=list)


def _is_python_dir(name: str) -> bool:
    return name.startswith("python") and (name == "python3" or name[6:7].isdigit())


def find_environments(tree: Tree, problems: list[Problem] | None = None) -> list[Environment]:
    """Walk the tree from / and return its environments, sorted by prefix. Each directory is listed once
    (a crafted image can hold one inside itself: noted in `problems`), within walkguard's budgets
    (WalkLimitError past them)."""
    found: dict[str, _Found] = {}
    guard = WalkGuard()
    stack = ["/"]
    while stack:
        path = stack.pop()
        kids = tree.children(path)
        if kids is None or guard.repeated(path, tree.directory_key(path)):
            continue
        guard.count(path, len(kids))
        if kids.get("pyvenv.cfg") == "file":
            found.setdefault(path, _Found()).venv = True
        is_conda = kids.get("conda-meta") == "dir"
        if is_conda:
            found.setdefault(path, _Found()).conda = True
        is_prefix = kids.get("lib") == "dir" or kids.get("bin") == "dir"
        parent_name = posixpath.basename(path)
        in_lib = parent_name in ("lib", "lib64")
        in_python = _is_python_dir(parent_name) and posixpath.basename(posixpath.dirname(path)) in ("lib", "lib64")
        depth = path.count("/") if path != "/" else 0
        for name, kind in kids.items():
            if kind != "dir":
                continue
            child = posixpath.join(path, name)
            if in_python:  # lib/pythonX.Y: only its site directory matters, not the standard library
                if name in SITE_DIR_NAMES:
                    prefix = posixpath.dirname(posixpath.dirname(path))
                    found.setdefault(prefix, _Found()).site_dirs.append(child)
                continue
            if in_lib and not _is_python_dir(name):
                continue
            if (path == "/" and name in SKIP_AT_ROOT) or name in SKIP_ANYWHERE or depth >= MAX_DEPTH:
                continue
            if (is_prefix and name in SKIP_IN_PREFIX) or (is_conda and name in SKIP_IN_CONDA):
                continue
            if name.endswith((".dist-info", ".egg-info")):
                continue
            stack.append(child)
    if problems is not None:
        problems += [Problem(path, message) for path, message in guard.alias_notes()]
    environments = []
    for prefix, info in sorted(found.items()):
        if not (info.venv or info.conda or info.site_dirs):
            continue
        kind = "venv" if info.venv else "conda" if info.conda else "system"
        versions = sorted({_python_version(d) for d in info.site_dirs} - {""})
        environments.append(Environment(prefix=prefix, kind=kind, site_dirs=tuple(sorted(info.site_dirs)),
                                        python=versions[-1] if versions else ""))
    return environments


def _python_version(site_dir: str) -> str:
    name = posixpath.basename(posixpath.dirname(site_dir))
    return name[len("python"):] if "." in name else ""


def pip_distributions(tree: Tree, env: Environment, problems: list[Problem]) -> list[Package]:
    packages = []
    for site in env.site_dirs:
        records = []
        for name, kind in sorted((tree.children(site) or {}).items()):
            if name.endswith(".dist-info") and kind == "dir":
                records.append(f"{site}/{name}/METADATA")
            elif name.endswith(".egg-info") and kind == "dir":
                records.append(f"{site}/{name}/PKG-INFO")
            elif name.endswith(".egg-info") and kind == "file":
                records.append(f"{site}/{name}")
        # Read in the tree's cheapest order (a squashfs: each shared block decompressed once), reported in name order.
        order = getattr(tree, "read_order", None)
        found = {metadata: read_name_version(tree, metadata) for metadata in (records if order is None else order(records))}
        for metadata in records:
            parsed = found[metadata]
            if parsed is None:
                problems.append(Problem(metadata, "missing or without Name/Version; pip does not list it either"))
                continue
            packages.append(Package(env.prefix, parsed[0], parsed[1], "pip"))
    return packages


def read_name_version(tree: Tree, path: str) -> tuple[str, str] | None:
    """(Name, Version) from a core metadata file in the tree; None when missing or without them."""
    head = tree.read(path, HEAD_BYTES)
    if head is None:
        return None
    parsed = parse_core_metadata(head)
    if parsed is None and len(head) == HEAD_BYTES and not header_is_complete(head):
        parsed = parse_core_metadata(tree.read(path, LONG_HEAD_BYTES) or b"")
    return parsed


def conda_packages(tree: Tree, env: Environment, problems: list[Problem]) -> list[Package]:
    meta_dir = f"{env.prefix.rstrip('/')}/conda-meta"
    packages = []
    for name, kind in sorted((tree.children(meta_dir) or {}).items()):
        if kind != "file" or not name.endswith(".json"):
            continue
        parsed = parse_conda_meta_filename(name)
        if parsed is None:  # not named by conda: the record itself says
            parsed = parse_conda_meta_json(tree.read(f"{meta_dir}/{name}", CONDA_RECORD_BYTES) or b"")
        if parsed is None:
            problems.append(Problem(f"{meta_dir}/{name}", "not a conda package record"))
            continue
        packages.append(Package(env.prefix, parsed[0], parsed[1], "conda"))
    return packages


def take_inventory(tree: Tree) -> Inventory:
    """Every environment in the tree and every package in each, within walkguard's budgets."""
    tree = ReadBudget(tree)
    inventory = Inventory()
    inventory.environments = find_environments(tree, inventory.problems)
    for env in inventory.environments:
        inventory.packages += pip_distributions(tree, env, inventory.problems)
        if env.kind == "conda":
            inventory.packages += conda_packages(tree, env, inventory.problems)
    inventory.packages = sorted(set(inventory.packages))
    return inventory
