"""catalogue.json (pure): its shape, and that it says what the page says."""

from __future__ import annotations

import json

from envbuild.catalogue.cataloguedata import CATALOGUE_FORMAT, render_json
from tests.support.catalogue_samples import sample_catalogue


def test_shape_and_content() -> None:
    data = json.loads(render_json(sample_catalogue()))
    assert data["catalogue_format"] == CATALOGUE_FORMAT
    assert set(data) == {"catalogue_format", "title", "generated_at", "envbuild_version", "images", "columns", "packages"}
    assert data["columns"] == ["/appl/images/pytorch-2.3.sif", "/appl/images/pytorch-2.4.sif", "/appl/other/lumi-pytorch.sif"]
    first, zstd, _, bad = data["images"]
    assert first["error"] is None and first["compression"] == "gzip" and first["runtime_limited"] is False
    assert first["build"]["spec"] == "pytorch-2.3" and first["build_record"]["record_format"] == 2
    assert first["environments"] == [{"prefix": "/opt/envbuild/venv", "kind": "venv", "python": "3.11", "packages": 3}]
    assert zstd["runtime_limited"] is True and "1.4.0" in zstd["runtime"]
    assert bad["error"].startswith("not a SIF image") and bad["environments"] == [] and bad["size"] is None
    torch = next(p for p in data["packages"] if p["key"] == "torch")
    assert torch["differs"] is True and torch["in_every_image"] is True
    assert set(torch["images"]) == set(data["columns"])
    assert torch["images"]["/appl/images/pytorch-2.4.sif"] == {
        "versions": "2.4.0", "state": "other", "where": [{"environment": "/opt/envbuild/venv", "version": "2.4.0", "source": "pip"}]}
    for package in data["packages"]:
        for cell in package["images"].values():
            assert cell["state"] in {"common", "other", "absent"}
            assert (cell["state"] == "absent") == (cell["where"] == [])
