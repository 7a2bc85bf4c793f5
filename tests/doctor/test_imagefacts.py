"""What doctor reads from an image file: libraries, libfabric's CXI provider, torch's build."""

from __future__ import annotations

from pathlib import Path

import pytest

from envbuild.doctor.imagecomms import image_facts
from envbuild.inventory.pyenvs import take_inventory
from envbuild.inventory.trees import DirectoryTree
from tests.support.doctor_standins import make_image


def facts(tmp_path: Path, kind: str, plugins: tuple[str, ...] = ()):
    image = make_image(tmp_path, kind)
    tree = DirectoryTree(image)
    return image_facts(str(image), tree, take_inventory(tree), plugins)


def test_laif_like_image_has_plugin_libfabric_with_cxi_and_rocm_torch(tmp_path: Path) -> None:
    found = facts(tmp_path, "laif", ("librccl-net*.so*",))
    assert found.libraries["net_plugin"] == ["/opt/aws-ofi-rccl/lib/librccl-net.so"]
    assert found.libraries["libfabric"] == ["/opt/libfabric/lib/libfabric.so.1"]
    assert found.libfabric_cxi is True
    assert found.has("hip")
    assert found.torch is not None
    assert (found.torch.version, found.torch.cuda, found.torch.hip) == ("2.10.0+rocm7.0", None, "7.0.51831")
    assert found.torch_env == "/opt/venv"


def test_libfabric_without_cxi_marker_is_not_cxi(tmp_path: Path) -> None:
    image = make_image(tmp_path, "lumi-noplugin")
    (image / "usr/lib64").mkdir(parents=True)
    (image / "usr/lib64/libfabric.so.1").write_bytes(b"\0fi_getinfo\0tcp\0")
    tree = DirectoryTree(image)
    found = image_facts(str(image), tree, take_inventory(tree))
    assert found.libfabric_cxi is False and not found.has("net_plugin")


@pytest.mark.parametrize(("kind", "verbs"), [("cuda-ib", True), ("cuda-noib", False)])
def test_ibverbs_and_provider(tmp_path: Path, kind: str, verbs: bool) -> None:
    found = facts(tmp_path, kind)
    assert found.has("libibverbs") is verbs and found.has("ibverbs_provider") is verbs
    assert found.torch is not None and found.torch.cuda == "12.6"


def test_image_without_torch(tmp_path: Path) -> None:
    (tmp_path / "bare/usr/lib").mkdir(parents=True)
    tree = DirectoryTree(tmp_path / "bare")
    found = image_facts(str(tmp_path / "bare"), tree, take_inventory(tree))
    assert found.torch is None and found.libfabric_cxi is None
