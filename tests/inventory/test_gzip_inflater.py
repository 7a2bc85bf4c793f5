"""gzip squashfs blocks are inflated by zlib-ng's binding where it is installed, else by zlib: both read an
image alike, and a damaged block is the same clear error with either."""

from __future__ import annotations

import zlib

import pytest

from envbuild.inventory import squashfs
from envbuild.inventory.image import read_inventory
from envbuild.shared.errors import ImageFormatError
from tests.support.inventory_layout import fixture_image


def test_zlib_and_the_installed_inflater_read_a_gzip_image_alike(monkeypatch: pytest.MonkeyPatch) -> None:
    image = str(fixture_image("gzip"))
    installed = read_inventory(image)
    monkeypatch.setattr(squashfs, "gzip_inflater", lambda: zlib)
    assert read_inventory(image) == installed
    assert installed.packages


def test_zlib_ng_is_used_where_it_is_installed() -> None:
    zlib_ng = pytest.importorskip("zlib_ng.zlib_ng")
    assert squashfs.gzip_inflater() is zlib_ng


@pytest.mark.parametrize("inflater", ["installed", "zlib"])
def test_a_damaged_gzip_block_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, inflater: str) -> None:
    if inflater == "zlib":
        monkeypatch.setattr(squashfs, "gzip_inflater", lambda: zlib)
    decompress, errors = squashfs._decompressor("gzip", "image.sif")
    with pytest.raises(errors):
        decompress(b"\x78\x9c not deflate at all", 100)
    fs = object.__new__(squashfs.Squashfs)
    fs.path, fs._decompressor, fs._codec_errors = "image.sif", decompress, errors
    with pytest.raises(ImageFormatError, match="the compressed block at squashfs byte 7 is damaged"):
        fs._decompress(b"\x78\x9c not deflate at all", 100, 7)
