"""The torch family rules (envbuild.envspec.torchfamily): which versions go with a torch, what a build's variant
is, when two builds disagree and what the message says; and the spec's pins and located errors."""

from __future__ import annotations

import pytest

from envbuild.envspec.loadspec import load_spec_text
from envbuild.envspec.torchfamily import (
    DEFAULT,
    TorchBuild,
    build_from_files,
    builds_from_pins,
    companion_problem,
    describe_variant,
    family_error,
    family_mismatches,
    gpu_vendor,
    matching_version,
    pin_companion,
    variants_agree,
    version_py_fields,
)
from envbuild.shared.errors import SpecError

# torch/version.py as torch 2.5.1+cu124 ships it (annotated assignments), and torchvision's (its cuda is
# computed when imported, so the file says nothing literal about it).
TORCH_VERSION_PY = """\
from typing import Optional

__all__ = ['__version__', 'debug', 'cuda', 'git_version', 'hip']
__version__ = '2.5.1+cu124'
debug = False
cuda: Optional[str] = '12.4'
git_version = 'a8d6afb511a69687bbb2b7e88a3cf67917e1697e'
hip: Optional[str] = None
"""
TORCHVISION_VERSION_PY = """\
__version__ = '0.20.1+cu124'
git_version = '3ac97aa9120137381ed1060f37237e44485ac2aa'
from torchvision.extension import _check_cuda_version
if _check_cuda_version() > 0:
    cuda = _check_cuda_version()
"""


@pytest.mark.parametrize(("package", "torch", "expected"), [
    ("torchvision", "2.13.0", "0.28.0"), ("torchvision", "2.5.1", "0.20.1"), ("torchvision", "2.7.1", "0.22.1"),
    ("torchvision", "2.6.0+rocm6.2.4", "0.21.0"), ("torchaudio", "2.13.0", "2.13.0"), ("torchaudio", "2.5.1+cpu", "2.5.1"),
    ("TorchVision", "2.13", "0.28.0"),
    # the one release off the rule (pytorch.org/get-started/previous-versions)
    ("torchvision", "2.0.1", "0.15.2"), ("torchaudio", "2.0.1", "2.0.2"),
    # unknown: another major, a nightly or pre-release, a package that is no companion
    ("torchvision", "1.13.1", None), ("torchvision", "3.0.0", None), ("torchvision", "2.14.0.dev20260101", None),
    ("torchvision", "2.14.0rc1", None), ("triton", "2.13.0", None), ("numpy", "2.13.0", None),
])
def test_matching_version(package: str, torch: str, expected: str | None) -> None:
    assert matching_version(package, torch) == expected


@pytest.mark.parametrize(("text", "pinned"), [
    ("torchvision", "torchvision==0.28.0"),
    ("torchaudio", "torchaudio==2.13.0"),
    ("torchvision[scipy]", "torchvision[scipy]==0.28.0"),
    ("torchvision; sys_platform == 'linux'", 'torchvision==0.28.0; sys_platform == "linux"'),
    ("torchvision>=0.27", "torchvision>=0.27"),  # a specifier that allows the matching version is kept
    ("torchvision==0.28.0+cpu", "torchvision==0.28.0+cpu"),
    ("torchvision @ https://example.org/torchvision-0.28.0-py3-none-any.whl",
     "torchvision @ https://example.org/torchvision-0.28.0-py3-none-any.whl"),
    ("numpy", "numpy"), ("triton", "triton"),
])
def test_companions_without_a_version_are_pinned(text: str, pinned: str) -> None:
    assert pin_companion(text, "2.13.0") == pinned


def test_a_specifier_excluding_the_matching_version_is_a_problem() -> None:
    message, fix = companion_problem("torchvision<0.28", "2.13.0") or ("", "")
    assert message == ("'torchvision<0.28' excludes torchvision 0.28.0, the version that goes with torch 2.13.0 "
                       "(python.pytorch.version); a build for another torch fails to load with this one")
    assert fix == "write torchvision==0.28.0, or leave the version out (envbuild then pins 0.28.0)"
    assert companion_problem("torchvision==0.28.0+cpu", "2.13.0") is None
    assert companion_problem("torchvision", "2.13.0") is None
    assert companion_problem("torchvision==0.1", "3.0.0") is None  # unknown major: not judged


@pytest.mark.parametrize(("build", "variant"), [
    (TorchBuild("torch", "2.13.0+cpu"), "cpu"),
    (TorchBuild("torch", "2.5.1+cu124"), "cu124"),
    (TorchBuild("torch", "2.7.1+rocm6.3"), "rocm6.3"),
    (TorchBuild("torchvision", "0.21.0+rocm6.2.4"), "rocm6.2.4"),
    (TorchBuild("torchvision", "0.28.0"), DEFAULT),
    (TorchBuild("torch", "2.13.0", cuda="12.8", reported=True), "cu128"),
    (TorchBuild("torch", "2.7.1", hip="6.3.42131-fa1d09cbd", reported=True), "rocm6.3"),
    (TorchBuild("torch", "2.13.0", reported=True), "cpu"),  # version.py says neither CUDA nor HIP
    (TorchBuild("torch", "2.13.0+git1234"), DEFAULT),  # a label that names no variant
])
def test_variant_from_label_or_reported_versions(build: TorchBuild, variant: str) -> None:
    assert build.variant == variant


def test_variants_in_words_and_vendors() -> None:
    assert describe_variant("cpu") == "the CPU-only build (cpu)"
    assert describe_variant("cu126") == "the CUDA 12.6 build (cu126)"
    assert describe_variant("rocm6.4") == "the ROCm 6.4 build (rocm6.4)"
    assert describe_variant(DEFAULT) == "PyPI's default build (no variant label; on Linux x86_64 a CUDA build)"
    assert [gpu_vendor(v) for v in ("cpu", "cu126", "rocm6.4", DEFAULT)] == [None, "nvidia", "amd", "nvidia"]


@pytest.mark.parametrize(("torch", "other", "agree"), [
    (TorchBuild("torch", "2.13.0+cpu"), TorchBuild("torchvision", "0.28.0+cpu"), True),
    (TorchBuild("torch", "2.13.0+cpu"), TorchBuild("torchvision", "0.28.0"), False),  # the case
    (TorchBuild("torch", "2.13.0+cu126"), TorchBuild("torchvision", "0.28.0+cu128"), False),
    (TorchBuild("torch", "2.13.0+cu126"), TorchBuild("torchvision", "0.28.0"), False),  # PyPI's CUDA is not known
    (TorchBuild("torch", "2.6.0+rocm6.2.4"), TorchBuild("torchvision", "0.21.0+rocm6.2.4"), True),
    (TorchBuild("torch", "2.6.0+rocm6.2.4"), TorchBuild("torchaudio", "2.6.0", hip="6.2.41133", reported=True), True),
    # both from PyPI without labels: made together
    (TorchBuild("torch", "2.13.0"), TorchBuild("torchvision", "0.28.0"), True),
    (TorchBuild("torch", "2.13.0", cuda="12.8", reported=True), TorchBuild("torchvision", "0.28.0"), True),
    (TorchBuild("torch", "2.13.0", cuda="12.8", reported=True),
     TorchBuild("torchvision", "0.28.0", cuda="12.6", reported=True), False),
    (TorchBuild("torch", "2.13.0", reported=True), TorchBuild("torchvision", "0.28.0+cpu"), True),
])
def test_when_builds_agree(torch: TorchBuild, other: TorchBuild, agree: bool) -> None:
    assert variants_agree(torch, other) is agree


def test_mismatches_name_the_package_both_variants_and_the_fix() -> None:
    builds = [TorchBuild("torch", "2.13.0+cpu"), TorchBuild("torchvision", "0.28.0"), TorchBuild("torchaudio", "2.13.0+cpu"),
              TorchBuild("triton", "3.5.0")]
    [mismatch] = family_mismatches(builds)
    assert (mismatch.package.name, mismatch.package.variant, mismatch.torch.variant) == ("torchvision", DEFAULT, "cpu")
    assert mismatch.message() == ("torchvision 0.28.0 is PyPI's default build (no variant label; on Linux x86_64 a CUDA "
                                  "build), but torch 2.13.0+cpu is the CPU-only build (cpu)")
    assert mismatch.fix.startswith("make torchvision 0.28.0+cpu reachable: PyTorch's index for the variant has it, "
                                   "https://download.pytorch.org/whl/cpu (set python.pytorch.index_url, or add it to the host's "
                                   "pip configuration")
    assert "or drop torchvision from the spec" in mismatch.fix


def test_an_unlabelled_torch_asks_for_the_companion_from_the_same_place() -> None:
    [mismatch] = family_mismatches([TorchBuild("torch", "2.13.0"), TorchBuild("torchaudio", "2.13.0+rocm6.4")])
    assert mismatch.fix.startswith("install torchaudio 2.13.0 from where torch comes from (PyPI's default build, no label)")
    assert "https://download.pytorch.org/whl/rocm6.4" in mismatch.fix


def test_no_torch_or_an_agreeing_family_is_no_mismatch() -> None:
    assert family_mismatches([TorchBuild("torchvision", "0.28.0")]) == []
    assert family_mismatches([TorchBuild("torch", "2.13.0+cpu"), TorchBuild("torchvision", "0.28.0+cpu")]) == []
    # the first of a name counts: the one earlier on sys.path is the one imported
    assert family_mismatches([TorchBuild("torch", "2.13.0+cpu"), TorchBuild("torchvision", "0.28.0+cpu"),
                              TorchBuild("torchvision", "0.28.0")]) == []


def test_the_error_lists_every_mismatch_and_each_fix_once() -> None:
    builds = builds_from_pins([("torch", "2.13.0+cpu"), ("torchvision", "0.28.0"), ("torchaudio", "2.13.0"), ("numpy", "2.3.0")])
    assert [b.name for b in builds] == ["torch", "torchvision", "torchaudio"]
    error = family_error(family_mismatches(builds), "the resolution of x.yaml", then="run `envbuild lock x.yaml` again")
    text = error.render()
    assert text.startswith("error: torch family mismatch in the resolution of x.yaml: torchvision and torchaudio must be "
                           "built for torch's variant")
    assert "  - torchvision 0.28.0 is PyPI's default build" in text and "  - torchaudio 2.13.0 is PyPI's default build" in text
    assert "operator torchvision::nms does not exist" in text
    assert error.hint and error.hint.count("reachable") == 2 and error.hint.endswith("; then run `envbuild lock x.yaml` again")


def test_version_py_is_read_as_text() -> None:
    assert version_py_fields(TORCH_VERSION_PY) == {"cuda": "12.4", "hip": None}
    assert version_py_fields(TORCHVISION_VERSION_PY) == {}  # computed when imported: unknown
    assert version_py_fields("cuda = None\n") == {"cuda": None}
    assert version_py_fields("this is not python (") == {}
    torch = build_from_files("torch", "2.5.1", TORCH_VERSION_PY)
    assert torch == TorchBuild("torch", "2.5.1", cuda="12.4", hip=None, reported=True) and torch.variant == "cu124"
    assert build_from_files("torchvision", "0.20.1", TORCHVISION_VERSION_PY).variant == DEFAULT
    assert build_from_files("torchvision", "0.28.0+cpu", None).variant == "cpu"


# -- the spec: pins and located errors -------------------------------------------------------------

SPEC = """\
name: family
system: local
base: debootstrap:bookworm
python:
  pytorch:
    version: "2.13.0"
    variant: cpu
    extras: [{extras}]
  packages:
    - numpy
    - {package}
"""


def test_the_spec_pins_companions_wherever_listed() -> None:
    spec = load_spec_text(SPEC.format(extras="torchaudio", package="torchvision")).spec
    assert spec.python.requirements() == ["torch==2.13.0", "torchaudio==2.13.0", "numpy", "torchvision==0.28.0"]


def test_without_pytorch_nothing_is_pinned() -> None:
    text = "name: plain\nsystem: local\nbase: debootstrap:bookworm\npython:\n  packages: [torchvision]\n"
    assert load_spec_text(text).spec.python.requirements() == ["torchvision"]


def test_a_companion_for_another_torch_is_an_error_at_its_line() -> None:
    with pytest.raises(SpecError) as caught:
        load_spec_text(SPEC.format(extras="'torchaudio==2.12.0'", package="torchvision<0.28"), "family.yaml")
    rendered = [problem.render() for problem in caught.value.problems]
    assert rendered[0].startswith("family.yaml:8:14: python.pytorch.extras[0]: 'torchaudio==2.12.0' excludes torchaudio "
                                  "2.13.0, the version that goes with torch 2.13.0")
    assert rendered[0].endswith("fix: write torchaudio==2.13.0, or leave the version out (envbuild then pins 2.13.0)")
    assert rendered[1].startswith("family.yaml:11:7: python.packages[1]: 'torchvision<0.28' excludes torchvision 0.28.0")
    assert caught.value.exit_code == 2


@pytest.mark.parametrize(("text", "problem"), [
    ("torchvision==0.28.0+cpu", False), ("torchvision>=0.20,==0.28.0+cpu", False), ("torchvision==0.28.*", False),
    ("torchvision==0.27.0+cpu", True), ("torchvision===weird", True),
])
def test_a_pin_to_a_build_of_the_matching_release_is_no_problem(text: str, problem: bool) -> None:
    assert (companion_problem(text, "2.13.0") is not None) is problem
