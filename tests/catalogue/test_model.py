"""The catalogue model (pure): the matrix's cells and their marks, unreadable images, column names."""

from __future__ import annotations

from envbuild.catalogue.cataloguedata import COMMON, MISSING, OTHER, ImageEntry, build_catalogue, package_lines
from envbuild.inventory.pyenvs import Inventory, Package
from tests.support.catalogue_samples import sample_catalogue


def _inventory(*packages: tuple[str, str, str]) -> Inventory:
    return Inventory(packages=[Package(env, name, version, "pip") for env, name, version in packages])


def test_cells_mark_the_versions_that_differ_from_the_most_common() -> None:
    lines = package_lines([
        ("a.sif", _inventory(("/v", "torch", "2.3.0"), ("/v", "numpy", "1.26"))),
        ("b.sif", _inventory(("/v", "torch", "2.4.0"), ("/v", "numpy", "1.26"))),
        ("c.sif", _inventory(("/v", "torch", "2.4.0"))),
    ])
    by_name = {line.name: line for line in lines}
    torch, numpy = by_name["torch"], by_name["numpy"]
    assert [(c.text, c.state) for c in torch.cells] == [("2.3.0", OTHER), ("2.4.0", COMMON), ("2.4.0", COMMON)]
    assert torch.differs and torch.everywhere
    assert [c.state for c in numpy.cells] == [COMMON, COMMON, MISSING]
    assert not numpy.differs and not numpy.everywhere


def test_a_tie_goes_to_the_leftmost_image() -> None:
    line, = package_lines([("a", _inventory(("/v", "x", "1"))), ("b", _inventory(("/v", "x", "2")))])
    assert [c.state for c in line.cells] == [COMMON, OTHER]


def test_names_are_matched_as_pip_does_and_every_copy_is_kept() -> None:
    line, = package_lines([
        ("a", _inventory(("/opt/conda", "Typing_Extensions", "4.12"), ("/usr", "typing-extensions", "4.10"))),
        ("b", _inventory(("/opt/venv", "typing.extensions", "4.12"))),
    ])
    assert line.key == "typing-extensions"
    assert line.cells[0].text == "4.12,4.10"
    assert line.cells[0].where == (("/opt/conda", "4.12", "pip"), ("/usr", "4.10", "pip"))


def test_unreadable_images_are_listed_but_are_no_column() -> None:
    catalogue = sample_catalogue()
    assert [image.label for image in catalogue.images] == ["pytorch-2.3.sif", "pytorch-2.4.sif", "lumi-pytorch.sif", "<odd>.sif"]
    assert catalogue.failed == 1 and catalogue.images[3].error.startswith("not a SIF image")
    assert len(catalogue.columns) == 3 and all(len(line.cells) == 3 for line in catalogue.packages)


def test_clashing_file_names_show_their_paths() -> None:
    catalogue = build_catalogue([ImageEntry("/a/img.sif", error="x"), ImageEntry("/b/img.sif", error="y")],
                                generated_at="t", envbuild_version="0")
    assert [image.label for image in catalogue.images] == ["/a/img.sif", "/b/img.sif"]
