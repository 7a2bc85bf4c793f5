"""The pip part of a conda env, checked before cotainr downloads anything. Pure.

A conda env file's pip list is where GPU builds of PyTorch come from (`torch==2.5.1+rocm6.2` from
`--extra-index-url https://download.pytorch.org/whl/rocm6.2`). Mistakes there cost a whole build (tens of
minutes of conda solving and downloads) before pip fails, or, worse, install a torch that cannot see the
GPUs. The checks: the wheels' variants and the wheel index agree, a variant PyPI does not carry has an index
that does, and the variant fits the system's GPU vendor.

A ROCm other than the base image's is a warning, not a refusal: PyTorch's ROCm wheels carry their own ROCm
runtime libraries [wheels], so torch does not use the base's ROCm. What must fit is the host's AMD GPU kernel
driver (amdgpu), which supports ROCm user space a few releases either side of its own [kmd], and whatever in
the image was built against the base's ROCm (an RCCL network plugin such as aws-ofi-rccl), which then loads
beside torch's own ROCm libraries. The LUMI course ran torch 2.2.2+rocm5.6 wheels on its ROCm 6 base.
  [wheels] https://pytorch.org/get-started/locally/ (Linux, pip, ROCm: the wheels from
           download.pytorch.org/whl/rocmX.Y, nothing else to install); envs/lumi-pytorch-rocm-wheels.yaml
  [kmd]    https://rocm.docs.amd.com/projects/install-on-linux/en/latest/reference/user-kernel-space-compat-matrix.html
"""

from __future__ import annotations

import re

from packaging.requirements import Requirement

from envbuild.envspec.conda import CondaEnv
from envbuild.envspec.torchfamily import LABELLED_FAMILY

TYPE_CHECKING = False
if TYPE_CHECKING:
    from envbuild.recipes.protocols import SystemRecipe

INDEX_VARIANT = re.compile(r"/whl/(?:nightly/)?(cpu|cu\d{3,4}|rocm\d+\.\d+(?:\.\d+)?)/?$")
LOCAL_VARIANT = re.compile(r"\+(cpu|cu\d{3,4}|rocm\d+\.\d+(?:\.\d+)?)$")


def requirement_variant(text: str) -> tuple[str, str | None]:
    """(package name, variant tag of an exact pin such as ==2.5.1+rocm6.2, or None)."""
    req = Requirement(text)
    for spec in req.specifier:
        if spec.operator in ("==", "===") and (match := LOCAL_VARIANT.search(spec.version)):
            return req.name.lower(), match.group(1)
    return req.name.lower(), None


def index_variant(url: str) -> str | None:
    match = INDEX_VARIANT.search(url)
    return match.group(1) if match else None


def conda_pip_problems(conda: CondaEnv, recipe: SystemRecipe, system: str, base: str) -> list[tuple[str, str]]:
    """(what is wrong, how to fix it) for each problem of the pip part; empty when it is consistent. `base` is
    the image cotainr starts from: its ROCm version is known when it is the recipe's own base."""
    part = conda.pip_part()
    problems: list[tuple[str, str]] = []
    pinned: dict[str, str] = {}
    unpinned: list[str] = []
    for text in part.requirements:
        try:
            name, variant = requirement_variant(text)
        except ValueError:
            continue  # URL and path requirements carry no variant
        if name in LABELLED_FAMILY:  # published with PyTorch's variant tags (+rocm6.2, +cu126, +cpu)
            if variant:
                pinned[text] = variant
            else:
                unpinned.append(text)
    indexed = {url: v for url in part.index_urls if (v := index_variant(url))}
    variants = set(pinned.values()) | set(indexed.values())
    if len(variants) > 1:
        listing = "; ".join([f"{req} is {v}" for req, v in pinned.items()] + [f"index {url} serves {v}" for url, v in indexed.items()])
        problems.append((f"the pip part mixes PyTorch variants: {listing}",
                         "pin every torch package to one variant and use that variant's index, e.g. "
                         "torch==2.5.1+rocm6.2 with --extra-index-url https://download.pytorch.org/whl/rocm6.2"))
        return problems
    variant = next(iter(variants), None)
    has_torch_index = any("download.pytorch.org" in url for url in part.index_urls + part.find_links) or bool(part.find_links)
    if pinned and not has_torch_index:
        first = next(iter(pinned))
        problems.append((f"{first} is only on PyTorch's wheel index, and the pip part names no index that has it",
                         f"add the line --extra-index-url https://download.pytorch.org/whl/{pinned[first]} to the pip list"))
    vendor = recipe.node.gpu_vendor if recipe.node is not None else None
    base_rocm = recipe.cotainr.rocm if base == recipe.cotainr.base_image else None
    if variant is None:
        if unpinned and vendor == "amd" and not indexed:
            problems.append((f"{unpinned[0]} from PyPI is the CUDA build: on {system} (AMD GPUs) it cannot use the GPUs",
                             f"pin the ROCm build, e.g. torch==2.5.1+rocm{base_rocm or '6.2'} with --extra-index-url "
                             f"https://download.pytorch.org/whl/rocm{base_rocm or '6.2'}"))
        return problems
    if vendor == "amd" and variant.startswith("cu"):
        problems.append((f"PyTorch variant {variant} is for NVIDIA GPUs; {system} has AMD GPUs",
                         "use a ROCm build (+rocmX.Y from https://download.pytorch.org/whl/rocmX.Y)"))
    elif vendor == "nvidia" and variant.startswith("rocm"):
        problems.append((f"PyTorch variant {variant} is for AMD GPUs; {system} has NVIDIA GPUs",
                         "use a CUDA build (+cuXYZ from https://download.pytorch.org/whl/cuXYZ)"))
    return problems


KMD_MATRIX = "https://rocm.docs.amd.com/projects/install-on-linux/en/latest/reference/user-kernel-space-compat-matrix.html"
ROCM_WHEELS = "https://pytorch.org/get-started/locally/"


def conda_pip_warnings(conda: CondaEnv, recipe: SystemRecipe, system: str, base: str) -> list[tuple[str, str]]:
    """(what to know, what to do about it) for a pip part that builds but may not do what is meant: PyTorch ROCm
    wheels for another ROCm than the base image's (known when `base` is the recipe's own conda base)."""
    base_rocm = recipe.cotainr.rocm if base == recipe.cotainr.base_image else None
    if not base_rocm:
        return []
    other = [(text, variant) for text in conda.pip_part().requirements
             if (variant := _labelled_pin(text) or "").startswith("rocm")
             and _major_minor(variant[4:]) != _major_minor(base_rocm)]
    if not other:
        return []
    text, variant = other[0]
    return [(f"{text} is built for ROCm {variant[4:]}; the {system} base image for conda builds has ROCm {base_rocm} "
             f"({recipe.cotainr.base_image}). PyTorch's ROCm wheels carry their own ROCm runtime, so torch does not "
             f"use the base's; what must fit is the host's AMD GPU driver (amdgpu), which supports ROCm user space a "
             f"few releases either side of its own, and anything in the image built against the base's ROCm {base_rocm}, "
             f"such as an RCCL network plugin (aws-ofi-rccl), which loads beside torch's ROCm {variant[4:]} libraries",
             f"if torch sees no GPU or RCCL falls back to TCP between nodes, pin wheels for ROCm {base_rocm} "
             f"(+rocm{base_rocm} from https://download.pytorch.org/whl/rocm{base_rocm}); see {ROCM_WHEELS} and {KMD_MATRIX}")]


def _labelled_pin(text: str) -> str | None:
    """The variant of a torch-family exact pin (torch==2.2.2+rocm5.6 -> rocm5.6), else None."""
    try:
        name, variant = requirement_variant(text)
    except ValueError:
        return None
    return variant if name in LABELLED_FAMILY else None


def _major_minor(version: str) -> tuple[str, ...]:
    return tuple(version.split(".")[:2])
