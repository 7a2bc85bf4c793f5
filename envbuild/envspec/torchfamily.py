"""The torch family: which packages belong to torch, which of their versions go together, and whether the
builds that were locked or installed follow torch's variant (cpu, cu126, rocm6.4). Pure: no files, no programs.

Why it matters: torchvision and torchaudio carry compiled operators built against one torch build. A torch
2.13.0+cpu next to PyPI's torchvision 0.28.0 (built for CUDA) imports, but torchvision's operators fail to
register ("operator torchvision::nms does not exist"): every member must come from torch's variant.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import Specifier
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from envbuild.shared.errors import EnvbuildError
from envbuild.shared.versionnumbers import release_numbers

# Every package whose binaries belong to one torch build. triton and pytorch-triton(-rocm) are pinned
# exactly by torch's own metadata (Requires-Dist), so the resolver already picks the matching one.
TORCH_FAMILY = ("torch", "torchvision", "torchaudio", "triton", "pytorch-triton", "pytorch-triton-rocm")
# Published by PyTorch per variant on download.pytorch.org/whl/<variant>, with the variant as the local
# version label (2.13.0+cpu, 0.28.0+cu126, 2.7.1+rocm6.3): a build's label names its variant.
LABELLED_FAMILY = ("torch", "torchvision", "torchaudio")
# Listed by users next to torch; their version follows torch's (see matching_version).
COMPANIONS = ("torchvision", "torchaudio")

VARIANT_LABEL = re.compile(r"^(cpu|cu\d{3,4}|rocm\d+\.\d+(?:\.\d+)?)$")
# A build without a label that says nothing of its CUDA/HIP: PyPI's default build of the package. On
# Linux x86_64 that is a CUDA build (torch's with the nvidia-* wheels as dependencies).
DEFAULT = "default"
PYTORCH_INDEX = "https://download.pytorch.org/whl"

# Releases that broke the rule below (pytorch.org/get-started/previous-versions: torch 2.0.1 came with
# torchvision 0.15.2 and torchaudio 2.0.2).
_EXCEPTIONS = {"2.0.1": {"torchvision": "0.15.2", "torchaudio": "2.0.2"}}


def matching_version(package: str, torch_version: str) -> str | None:
    """The version of `package` (torchvision, torchaudio) released with torch `torch_version`; None when not
    known (another package, torch 1.x or a future 3.x, a pre-release or nightly, which pair by date).

    The rule for torch 2.x, from pytorch.org/get-started/previous-versions and torchvision's compatibility
    table (github.com/pytorch/vision#installation): torchvision 0.(minor+15).patch (2.5.1 -> 0.20.1,
    2.13.0 -> 0.28.0); torchaudio the same version as torch (2.5.1 -> 2.5.1)."""
    name = canonicalize_name(package)
    try:
        version = Version(torch_version)
    except InvalidVersion:
        return None
    if name not in COMPANIONS or version.major != 2 or version.is_prerelease or version.is_devrelease:
        return None
    release = f"{version.major}.{version.minor}.{version.micro}"
    if release in _EXCEPTIONS:
        return _EXCEPTIONS[release][name]
    if name == "torchvision":
        return f"0.{version.minor + 15}.{version.micro}"
    return release


def _companion(text: str, torch_version: str) -> tuple[Requirement, str] | None:
    """The parsed requirement and its matching version when `text` names a companion listed by name."""
    try:
        req = Requirement(text)
    except InvalidRequirement:
        return None
    matching = matching_version(req.name, torch_version)
    return None if matching is None or req.url else (req, matching)


def pin_companion(text: str, torch_version: str) -> str:
    """One requirement of a spec with `torch==torch_version`, a companion without a version pinned to the
    matching one (`torchvision` -> `torchvision==0.28.0`); anything else as it is."""
    found = _companion(text, torch_version)
    if found is None or found[0].specifier:
        return text
    req, matching = found
    extras = f"[{','.join(sorted(req.extras))}]" if req.extras else ""
    marker = f"; {req.marker}" if req.marker else ""
    return f"{req.name}{extras}=={matching}{marker}"


def pin_companions(requirements: list[str], torch_version: str) -> list[str]:
    """Every requirement, the companions without a version pinned to torch's matching version."""
    return [pin_companion(text, torch_version) for text in requirements]


def companion_problem(text: str, torch_version: str) -> tuple[str, str] | None:
    """(what is wrong, how to fix it) when `text` asks for a companion at versions that exclude the one
    released with torch `torch_version`; None otherwise."""
    found = _companion(text, torch_version)
    if found is None or all(_admits(spec, found[1]) for spec in found[0].specifier):
        return None
    req, matching = found
    return (f"{text!r} excludes {req.name} {matching}, the version that goes with torch {torch_version} "
            "(python.pytorch.version); a build for another torch fails to load with this one",
            f"write {req.name}=={matching}, or leave the version out (envbuild then pins {matching})")


def _admits(spec: Specifier, matching: str) -> bool:
    """Whether one specifier allows a build of the `matching` release: `==0.28.0+cpu` names one (its
    variant's) though it does not contain the bare 0.28.0."""
    if spec.contains(matching, prereleases=True):
        return True
    public, _, local = spec.version.partition("+")
    try:
        return spec.operator in ("==", "===") and bool(local) and Version(public) == Version(matching)
    except InvalidVersion:
        return False  # `===` takes any text


def _release(version: str) -> tuple[int, ...]:
    return (release_numbers(version) or ())[:2]


@dataclass(frozen=True)
class TorchBuild:
    """One installed or locked distribution of the torch family, and what it was built for.

    `cuda` and `hip` are what the build reports in its version.py (torch/version.py: cuda = '12.6',
    hip = None); `reported` says they were read, so that None/None means a CPU build rather than unknown."""

    name: str
    version: str
    cuda: str | None = None
    hip: str | None = None
    reported: bool = False

    @property
    def canonical(self) -> str:
        return canonicalize_name(self.name)

    @property
    def label(self) -> str | None:
        """The variant in the local version label (+cpu, +cu126, +rocm6.4); None without one."""
        _, sep, local = self.version.partition("+")
        return local if sep and VARIANT_LABEL.match(local) else None

    @property
    def variant(self) -> str:
        """cpu, cu126, rocm6.4: from the label, else from the CUDA/HIP version the build reports, else
        DEFAULT (PyPI's default build: a CUDA build on Linux x86_64)."""
        if self.label:
            return self.label
        if self.hip:
            return "rocm" + ".".join(str(n) for n in _release(self.hip))
        if self.cuda:
            return "cu" + "".join(str(n) for n in _release(self.cuda))
        return "cpu" if self.reported else DEFAULT

    def describe(self) -> str:
        """`torch 2.13.0+cpu (cpu)`, `torchvision 0.28.0 (PyPI's default build)`."""
        variant = "PyPI's default build" if self.variant == DEFAULT else self.variant
        return f"{self.name} {self.version} ({variant})"


def describe_variant(variant: str) -> str:
    """A variant in words, for messages."""
    if variant == DEFAULT:
        return "PyPI's default build (no variant label; on Linux x86_64 a CUDA build)"
    if variant == "cpu":
        return "the CPU-only build (cpu)"
    if variant.startswith("cu"):
        digits = variant[2:]
        return f"the CUDA {digits[:-1]}.{digits[-1]} build ({variant})"
    return f"the ROCm {variant[4:]} build ({variant})"


def gpu_vendor(variant: str) -> str | None:
    """Whose GPUs a variant uses: nvidia, amd, or None (cpu). DEFAULT counts as nvidia (see DEFAULT)."""
    if variant.startswith("rocm"):
        return "amd"
    if variant.startswith("cu") or variant == DEFAULT:
        return "nvidia"
    return None


def _normalised(variant: str) -> str:
    # ROCm builds are compared by major.minor: hip '6.2.41133' reports rocm6.2 where the label says rocm6.2.4.
    return ".".join(variant.split(".")[:2]) if variant.startswith("rocm") else variant


def variants_agree(torch: TorchBuild, other: TorchBuild) -> bool:
    """Whether `other` was built for the variant of `torch`.

    Two labelled builds agree when the labels are equal: PyTorch's index for a variant labels the whole
    family alike. A labelled and an unlabelled build agree only when the unlabelled one reports the same
    CUDA/HIP. Two unlabelled builds are both PyPI's default builds, made together, unless both report
    a CUDA/HIP and these differ."""
    if torch.label and other.label:
        return torch.label == other.label
    if torch.label or other.label:
        labelled, plain = (torch, other) if torch.label else (other, torch)
        return plain.variant != DEFAULT and _normalised(plain.variant) == _normalised(labelled.variant)
    return DEFAULT in (torch.variant, other.variant) or _normalised(torch.variant) == _normalised(other.variant)


@dataclass(frozen=True)
class FamilyMismatch:
    """A member of the torch family built for another variant than torch."""

    package: TorchBuild
    torch: TorchBuild
    fix: str

    def message(self) -> str:
        return (f"{self.package.name} {self.package.version} is {describe_variant(self.package.variant)}, but torch "
                f"{self.torch.version} is {describe_variant(self.torch.variant)}")


def _fix(package: TorchBuild, torch: TorchBuild) -> str:
    matching = matching_version(package.name, torch.version) or "<the version for this torch>"
    if torch.variant == DEFAULT:
        return (f"install {package.name} {matching} from where torch comes from (PyPI's default build, no label), "
                f"or torch's {package.variant} build from {PYTORCH_INDEX}/{package.variant} (python.pytorch.variant)")
    tag = torch.label or torch.variant
    return (f"make {package.name} {matching}+{tag} reachable: PyTorch's index for the variant has it, {PYTORCH_INDEX}/{tag} "
            f"(set python.pytorch.index_url, or add it to the host's pip configuration as extra-index-url, or a "
            f"find-links directory holding the wheel); or drop {package.name} from the spec if the image does not need it")


def first_of_each(builds: list[TorchBuild]) -> dict[str, TorchBuild]:
    """canonical name -> the first build of that name (the one earlier on sys.path is the one imported)."""
    first: dict[str, TorchBuild] = {}
    for build in builds:
        first.setdefault(build.canonical, build)
    return first


def family_mismatches(builds: list[TorchBuild]) -> list[FamilyMismatch]:
    """Each torchvision/torchaudio whose variant differs from torch's; empty without torch. The first
    build of a name counts (the one earlier on sys.path is the one imported)."""
    first = first_of_each(builds)
    torch = first.get("torch")
    if torch is None:
        return []
    return [FamilyMismatch(first[name], torch, _fix(first[name], torch))
            for name in COMPANIONS if name in first and not variants_agree(torch, first[name])]


def family_error(mismatches: list[FamilyMismatch], where: str, *, then: str = "") -> EnvbuildError:
    """The error that stops a lock or a build: every mismatch, and how to fix each."""
    lines = "\n".join(f"  - {m.message()}" for m in mismatches)
    fixes = "; ".join(dict.fromkeys(m.fix for m in mismatches))
    return EnvbuildError(
        f"torch family mismatch in {where}: torchvision and torchaudio must be built for torch's variant "
        f"(their compiled operators fail to load otherwise, e.g. \"operator torchvision::nms does not exist\"):\n{lines}",
        fixes + (f"; then {then}" if then else ""))


def builds_from_pins(pins: list[tuple[str, str]]) -> list[TorchBuild]:
    """The labelled family members among (name, version) pins (a lock: only the labels are known)."""
    return [TorchBuild(name, version) for name, version in pins if canonicalize_name(name) in LABELLED_FAMILY]


def version_py_fields(text: str) -> dict[str, str | None]:
    """`cuda` and `hip` as a build's version.py assigns them (`cuda: Optional[str] = '12.6'`, `hip = None`),
    read as text with `ast`, never imported: importing a mismatched torchvision is what fails. A name assigned
    anything but a literal (torchvision computes its cuda when imported) is left out."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return {}
    found: dict[str, str | None] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        else:
            continue
        if isinstance(target, ast.Name) and target.id in ("cuda", "hip") and isinstance(value, ast.Constant) \
                and (value.value is None or isinstance(value.value, str)):
            found[target.id] = value.value
    return found


def build_from_files(name: str, version: str, version_py: str | None) -> TorchBuild:
    """A TorchBuild from a dist-info's Name and Version and, when there is one, the package's version.py text."""
    fields = version_py_fields(version_py) if version_py else {}
    return TorchBuild(name, version, cuda=fields.get("cuda"), hip=fields.get("hip"), reported=bool(fields))
