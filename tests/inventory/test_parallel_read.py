"""Images read by forked workers (envbuild.inventory.parallelread) answer as one read in this process does,
and the index they write after answering holds every image once the command has waited for them."""

from __future__ import annotations

import shutil
from dataclasses import asdict
from pathlib import Path

import pytest

from envbuild.inventory import parallelread
from envbuild.inventory.image import image_arch, read_inventory
from envbuild.inventory.inventorycache import InventoryCache, inventory_to_dict
from envbuild.inventory.overlayvenv import OverlayVenv
from tests.support.inventory_layout import FIXTURE_COMPRESSIONS, fixture_image


def copies(tmp_path: Path, count: int) -> list[str]:
    """`count` images of the committed fixtures, each a file of its own (an index entry of its own)."""
    paths = []
    for number in range(count):
        compression = FIXTURE_COMPRESSIONS[number % len(FIXTURE_COMPRESSIONS)]
        path = tmp_path / f"image-{number}.{compression}.sif"
        shutil.copyfile(fixture_image(compression), path)
        paths.append(str(path))
    return paths


def test_the_plain_form_of_an_inventory_is_what_asdict_makes() -> None:
    inventory = read_inventory(str(fixture_image("gzip")))
    inventory.overlay = OverlayVenv(mount="/user-software", python="3.11", base_site_dirs=("/opt/venv/lib",),
                                    home="/usr/bin", system_site=False, base_ref="base.sif", base_sif_id="id",
                                    base_digest="sha256:0")
    expected = {"environments": [asdict(e) for e in inventory.environments],
                "packages": [asdict(p) for p in inventory.packages],
                "problems": [asdict(p) for p in inventory.problems], "overlay": asdict(inventory.overlay)}
    assert inventory.packages and inventory.environments
    assert inventory_to_dict(inventory) == expected


def test_workers_answer_as_this_process_reads_and_leave_the_index_written(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setattr(parallelread, "_cores", lambda: 2)
    forked: list[int] = []
    in_workers = parallelread._read_in_workers

    def counted(paths: list[str], cache: InventoryCache, workers: int) -> object:
        forked.append(workers)
        return in_workers(paths, cache, workers)

    monkeypatch.setattr(parallelread, "_read_in_workers", counted)
    paths = copies(tmp_path, 4)
    cache = InventoryCache()
    answers = parallelread.read_listings(paths, cache)
    assert forked, "read in this process: the test runner has other threads"
    parallelread.wait_for_index_writes()
    for path in paths:
        alone = {**inventory_to_dict(read_inventory(path)), "arch": image_arch(path)}
        assert answers[path] == alone
        assert cache.listing_entry(path) == alone  # written by the worker before the command ends

