"""The content-addressed build store: what is in it, who is using it, and what may go.

Layout under the store root (`envbuild.host.runtime.default_cache_dir()`; the build code relies on it):

    bases/<name>/   rootfs/, complete, [digest], [meta.json], [last-used], [content.json]
    envs/<name>/    rootfs/, complete, meta.json, freeze.txt, [digest, file-digests], [last-used]
    images/<name>/  image.sif, complete, meta.json, [last-used], [content.json], [tree-manifest.json.gz] (full
                    images: what a --layered build compares with, envbuild.sif.manifest)
    overlays/<name>/  overlay.sqsh, complete, meta.json, [last-used], [content.json]   (venv overlays)
    overlays/base-<name>/  digest, probe-<python>.json, complete        (a base .sif's digest and Python, once)
    locks/<kind>-<name>.lock   flock'ed by a build while it creates or uses an entry
    work/<build>/   scratch of running (or killed) builds
    trash/<name>-<random>/     entries being removed (renamed here first, so removal is atomic)
    uv/, pip/       installer download caches

An entry is complete only once its `complete` marker exists; a directory without it is what a killed
build left behind. `content.json` records what the entry was made with (the size and sha256 of
image.sif or overlay.sqsh, a base's root file system's tree digest), and an env layer's `digest` the tree
digest of its root file system: envbuild.store.integrity.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from envbuild.shared.errors import EnvbuildError

# Entry kind -> the store directory that holds entries of that kind.
ENTRY_DIRS = {"base": "bases", "env": "envs", "image": "images", "overlay": "overlays"}
DOWNLOAD_CACHES = ("uv", "pip")
LOCK_KINDS = (*ENTRY_DIRS, "work", "download")
# Listing order: what was built, then what builds left behind, then the download caches.
KIND_ORDER = ("base", "env", "image", "overlay", "work", "trash", "download")

# The files of an entry directory.
COMPLETE = "complete"
META = "meta.json"
LAST_USED = "last-used"
CONTENT = "content.json"
MANIFEST = "tree-manifest.json.gz"  # images: what a --layered build compares with (envbuild.sif.manifest)

# A build that is still running keeps touching its files; an hour of silence means it was killed. This is
# a floor, never lowered by --older-than, because removing a running build's scratch breaks that build.
STALE_AFTER_SECONDS = 3600.0


def check_entry_name(name: str) -> None:
    if not name or name in (".", "..") or "/" in name or "\0" in name:
        raise EnvbuildError(f"invalid store entry name {name!r}", "an entry name is one path component, without '/'")


def kind_dir(root: Path, kind: str) -> Path:
    if kind == "download":
        return root
    return root / ENTRY_DIRS.get(kind, kind)




@dataclass(frozen=True)
class EntryPaths:
    """The files of one entry directory, as text (build plans show them in their steps)."""

    dir: str

    @property
    def complete(self) -> str:
        return f"{self.dir}/{COMPLETE}"

    @property
    def meta(self) -> str:
        return f"{self.dir}/{META}"

    @property
    def last_used(self) -> str:
        return f"{self.dir}/{LAST_USED}"

    @property
    def content(self) -> str:
        """What the entry was made with (envbuild.store.integrity)."""
        return f"{self.dir}/{CONTENT}"

    @property
    def rootfs(self) -> str:
        """bases and envs: the root file system (made as `rootfs.partial`, then renamed)."""
        return f"{self.dir}/rootfs"

    @property
    def digest(self) -> str:
        """bases: the content digest (a key input: the tree's, or the local .sif's it came from); envs: the
        tree digest of the root file system, written by the env step before `complete` (its record)."""
        return f"{self.dir}/digest"

    @property
    def file_digests(self) -> str:
        """envs: each file's sha256 by inode, size and time, kept with `digest` so that a layer built on this
        one (hard links to its files) records its own digest without reading them again (envbuild.shared.treedigest)."""
        return f"{self.dir}/file-digests"

    @property
    def freeze(self) -> str:
        """envs: the venv's packages, one `name==version` a line (for choosing a parent env layer)."""
        return f"{self.dir}/freeze.txt"

    @property
    def image(self) -> str:
        """images: the SIF file."""
        return f"{self.dir}/image.sif"

    @property
    def manifest(self) -> str:
        """full images: every file of the tree, for a --layered build over this image (envbuild.sif.manifest)."""
        return f"{self.dir}/{MANIFEST}"

    @property
    def overlay(self) -> str:
        """overlays: the squashfs file."""
        return f"{self.dir}/overlay.sqsh"

    def probe(self, python: str) -> str:
        """overlays/base-*: what the base's Python is and has, per interpreter choice ("" = detected)."""
        import hashlib

        # v2: with the C library version (for locks)
        return f"{self.dir}/probe-v2-{hashlib.sha256(python.encode()).hexdigest()[:12]}.json"


@dataclass(frozen=True)
class StorePaths:
    """Where things lie in the store under `root`, as text (see the layout above)."""

    root: str

    def entry(self, kind: str, name: str) -> EntryPaths:
        return EntryPaths(f"{self.root}/{ENTRY_DIRS[kind]}/{name}")

    def base(self, name: str) -> EntryPaths:
        return self.entry("base", name)

    def env(self, name: str) -> EntryPaths:
        return self.entry("env", name)

    def image(self, name: str) -> EntryPaths:
        return self.entry("image", name)

    def overlay(self, name: str) -> EntryPaths:
        return self.entry("overlay", name)

    def work(self, build: str) -> str:
        return f"{self.root}/work/{build}"

    def download_cache(self, installer: str) -> str:
        """uv's or pip's download cache, shared by every build."""
        return f"{self.root}/{installer}"

    def lock(self, kind: str, name: str) -> str:
        return f"{self.root}/locks/{kind}-{name}.lock"
