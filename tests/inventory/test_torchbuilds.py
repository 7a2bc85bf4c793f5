"""Reading the torch family from a root file system's files (envbuild.inventory.installedtorch): a fake
site-packages tree in tmp_path stands for a build's sandbox."""

from __future__ import annotations

from pathlib import Path

from envbuild.envspec.specmodel import VENV_PREFIX
from envbuild.envspec.torchfamily import DEFAULT, TorchBuild
from envbuild.inventory.installedtorch import env_family, env_site_dirs, family_in_site_dirs
from envbuild.inventory.trees import DirectoryTree
from envbuild.shared.overlayformat import BASE_PTH

SITE = f"{VENV_PREFIX}/lib/python3.11/site-packages"


def install(root: Path, site: str, name: str, version: str, version_py: str | None = None, *,
            dist_name: str | None = None) -> None:
    """A dist-info as an installer leaves it (named by the normalised name; METADATA says `dist_name` when
    given), and the package's version.py when given."""
    info = root / site.lstrip("/") / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist_name or name}\nVersion: {version}\n"
                                   "Requires-Dist: numpy\n\nlong description\n")
    if version_py is not None:
        package = root / site.lstrip("/") / name.replace("-", "_")
        package.mkdir(parents=True, exist_ok=True)
        (package / "version.py").write_text(version_py)


def test_the_family_with_labels_and_version_py(tmp_path: Path) -> None:
    install(tmp_path, SITE, "torch", "2.13.0+cpu", "__version__ = '2.13.0+cpu'\ncuda: Optional[str] = None\nhip = None\n")
    install(tmp_path, SITE, "torchvision", "0.28.0", "__version__ = '0.28.0'\nfrom torchvision.extension import x\n")
    install(tmp_path, SITE, "numpy", "2.3.0")
    install(tmp_path, SITE, "pytorch-triton-rocm", "3.2.0")  # pinned by torch itself: not read
    builds = env_family(DirectoryTree(tmp_path), VENV_PREFIX)
    assert builds == [TorchBuild("torch", "2.13.0+cpu", cuda=None, hip=None, reported=True),
                      TorchBuild("torchvision", "0.28.0")]
    assert [b.variant for b in builds] == ["cpu", DEFAULT]


def test_cuda_reported_by_an_unlabelled_torch(tmp_path: Path) -> None:
    install(tmp_path, SITE, "torch", "2.13.0", "cuda: Optional[str] = '12.8'\nhip: Optional[str] = None\n")
    install(tmp_path, SITE, "torchaudio", "2.13.0", dist_name="TorchAudio")
    [torch, audio] = env_family(DirectoryTree(tmp_path), VENV_PREFIX)
    assert torch.variant == "cu128" and audio == TorchBuild("TorchAudio", "2.13.0")


def test_the_base_venvs_named_in_the_pth_file_come_after_the_own(tmp_path: Path) -> None:
    """A venv made from a base venv's Python (LAIF's /opt/venv) imports that venv's torch."""
    base_site = "/opt/venv/lib/python3.12/site-packages"
    (tmp_path / SITE.lstrip("/")).mkdir(parents=True)
    (tmp_path / SITE.lstrip("/") / BASE_PTH).write_text(f"# base\n{base_site}\nimport os\n\n")
    install(tmp_path, base_site, "torch", "2.7.1+rocm6.4.1")
    install(tmp_path, base_site, "torchvision", "0.22.1+rocm6.4.1")
    install(tmp_path, SITE, "torchvision", "0.22.1")
    tree = DirectoryTree(tmp_path)
    assert env_site_dirs(tree, VENV_PREFIX) == [SITE, base_site]
    assert [(b.name, b.version) for b in env_family(tree, VENV_PREFIX)] == [
        ("torchvision", "0.22.1"), ("torch", "2.7.1+rocm6.4.1"), ("torchvision", "0.22.1+rocm6.4.1")]


def test_an_environment_without_the_family_or_without_a_venv(tmp_path: Path) -> None:
    install(tmp_path, SITE, "six", "1.17.0")
    tree = DirectoryTree(tmp_path)
    assert env_family(tree, VENV_PREFIX) == []
    assert env_family(tree, "/nowhere") == [] and env_site_dirs(tree, "/nowhere") == []
    assert family_in_site_dirs(tree, ["/missing/site-packages"]) == []
    # a dist-info without METADATA is passed over (pip does not list it either)
    (tmp_path / SITE.lstrip("/") / "torch-2.13.0.dist-info").mkdir()
    assert env_family(tree, VENV_PREFIX) == []
