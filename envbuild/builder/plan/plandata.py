"""The input of the build planners and the plans they return, as plain data.

Both the store-key computation (builder/plan/layers.py) and the planners (builder/plan/imageplan.py, builder/plan/upperplan.py,
builder/plan/overlayplan.py, builder/plan/condaplan.py) read a BuildRequest; keeping it here, apart from both, is what keeps
them free of an import cycle.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from envbuild.sif.compression import DEFAULT_COMPRESSION

if TYPE_CHECKING:
    from envbuild.builder.plan.actions import Step
    from envbuild.envspec.specmodel import Spec
    from envbuild.host.buildhost import HostFacts
    from envbuild.recipes.protocols import SystemRecipe


@dataclass(frozen=True)
class SpecSource:
    """The validated spec and the file it came from."""

    spec: Spec
    text: str
    sha256: str
    directory: str  # absolute directory of the spec file, for files[].src
    file_digests: tuple[tuple[str, str], ...] = ()  # (files[].src, content digest), for the image key


@dataclass(frozen=True)
class BaseSource:
    """Where the base comes from and, once it is in the store, its digest."""

    path: str | None = None  # localimage: absolute host path of the .sif or sandbox dir
    fingerprint: str = ""  # localimage: .sif size and mtime / sandbox tree digest, so a changed base is not served from cache
    # Known once the base is in the store (the base plan has run); "" while planning a dry run.
    digest: str = ""
    sif_id: str = ""  # localimage .sif: the SIF header's image UUID (overlays record it; envrun compares it)
    size: int = 0  # localimage .sif: bytes
    arch: str = ""  # localimage: its architecture (SIF header, or a sandbox's programs), normalised; "" unknown


@dataclass(frozen=True)
class LockSource:
    """--locked: the lock as `requirements.txt` text with hashes, its text, and the Python it targets."""

    requirements: str | None = None  # None: not a locked build
    text: str = ""
    sha256: str = ""
    python: str = ""  # major.minor, checked against the base's interpreter before installing


@dataclass(frozen=True)
class ImageOptions:
    """Where the image goes and how it is made."""

    output: str  # absolute path of the .sif to produce
    build_id: str  # unique per build (names the work dir and the partial image)
    as_root: bool = True
    keep_work: bool = False
    compression: str = DEFAULT_COMPRESSION
    source_date_epoch: int | None = None
    layered: bool = False  # --layered: the difference as a SIF overlay partition (envbuild.sif.layeredwriter)
    built_at: str = ""  # ISO-8601 time recorded in the image


@dataclass(frozen=True)
class BuildRequest:
    """What the user asked for, plus everything the planner needs from outside, as data."""

    source: SpecSource
    recipe: SystemRecipe
    facts: HostFacts
    options: ImageOptions
    recipe_digest: str = ""
    base: BaseSource = field(default_factory=BaseSource)
    lock: LockSource = field(default_factory=LockSource)
    env_parent: str | None = None  # a complete env entry (store name) to install the difference on top of
    # (tree, snapshot): a hard-linked copy of env_parent's tree and the guard's snapshot of it, made while the
    # lock was resolved (envbuild.builder.sessions.prefetch); the env step renames it into place instead of copying
    env_parent_copy: tuple[str, str] | None = None
    squash_parent: str | None = None  # --layered: a stored full image (entry name) to add the difference to

    @property
    def spec(self) -> Spec:
        return self.source.spec

    def with_base_digest(self, digest: str) -> BuildRequest:
        """The same request once the base is in the store (the key of the env layer depends on the digest)."""
        return replace(self, base=replace(self.base, digest=digest))


@dataclass(frozen=True)
class BasePlan:
    """Getting the base root filesystem into the store (cached across builds) and its digest recorded."""

    entry: str
    rootfs: str
    digest_file: str
    steps: tuple[Step, ...]


@dataclass(frozen=True)
class Layers:
    base_entry: str
    env_entry: str
    env_key: str
    env_compat: str
    env_parent: str | None
    image_entry: str
    image_key: str


@dataclass(frozen=True)
class BuildPlan:
    name: str
    output: str
    work_dir: str
    sandbox: str
    installer: str
    requirements: tuple[str, ...]
    package_sources: tuple[str, ...]  # index URLs and find-links as given on the host (credentials redacted when shown)
    layers: Layers
    store_image: str  # the finished image in the store, copied to `output`
    steps: tuple[Step, ...]
