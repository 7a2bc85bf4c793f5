"""`envbuild catalogue` end to end on small images: which files IMAGES name, bad files (reported, marked,
exit 1, the rest rendered), the written page and JSON, the inventory cache."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from envbuild.catalogue.site import expand_images
from tests.conftest import REPO, run_cli
from tests.support.inventory_layout import cache_env, fixture_image, inventory_cache_entries

ENVBUILD = str(REPO / "bin" / "envbuild")


@pytest.fixture
def cli_env(tmp_path: Path) -> dict[str, str]:
    return cache_env(tmp_path)


def test_directories_stand_for_their_images_and_sandboxes_for_themselves(tmp_path: Path) -> None:
    shelf = tmp_path / "shelf"
    shelf.mkdir()
    for name in ("b.sif", "a.sif", "env.sqsh", "notes.txt"):
        (shelf / name).write_text("")
    (shelf / "sub.sif").mkdir()  # a directory named like an image is not one
    sandbox = tmp_path / "sandbox"
    (sandbox / ".singularity.d").mkdir(parents=True)
    (tmp_path / "empty").mkdir()
    images, problems = expand_images([str(shelf), str(sandbox), str(shelf / "a.sif"), str(tmp_path / "missing.sif"),
                                      str(tmp_path / "empty")])
    assert images == [str(shelf / "a.sif"), str(shelf / "b.sif"), str(shelf / "env.sqsh"), str(sandbox),
                      str(tmp_path / "missing.sif")]
    assert problems == [f"{tmp_path / 'empty'}: no .sif or .sqsh files in this directory"]


def test_command_writes_page_and_json_and_marks_bad_files(tmp_path: Path, cli_env) -> None:
    shelf = tmp_path / "shelf"
    shelf.mkdir()
    shutil.copy(fixture_image("gzip"), shelf / "good.sif")
    shutil.copy(fixture_image("zstd"), shelf / "fast.sif")
    (shelf / "readme.sif").write_text("not an image")
    (shelf / "cut.sif").write_bytes(fixture_image("gzip").read_bytes()[:40000])
    site = tmp_path / "site"
    result = run_cli([ENVBUILD, "catalogue", str(shelf), "-o", str(site), "--title", "Shelf"], env_extra=cli_env)
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert f"error: {shelf / 'readme.sif'}: not a SIF image" in result.stderr
    assert f"error: {shelf / 'cut.sif'}:" in result.stderr and "fix:" in result.stderr
    assert "2 of 4 images could not be read (marked on the page)" in result.stderr
    assert f"wrote {site / 'index.html'} and {site / 'catalogue.json'}: 4 images, 16 packages" in result.stdout  # distinct names
    data = json.loads((site / "catalogue.json").read_text())
    assert [Path(image["path"]).name for image in data["images"]] == ["cut.sif", "fast.sif", "good.sif", "readme.sif"]
    assert [bool(image["error"]) for image in data["images"]] == [True, False, False, True]
    assert len(data["columns"]) == 2 and data["title"] == "Shelf"
    page = (site / "index.html").read_text()
    assert page.count('<tr class="error">') == 2 and "<title>Shelf</title>" in page
    assert '<tr data-name="torch">' in page  # the same version in both: no mark
    # The inventory reader's cache: one entry per readable image, reused by `packages` and the next run.
    assert len(inventory_cache_entries(cli_env)) == 2


def test_nothing_to_read_is_a_usage_error_and_a_file_as_output_too(tmp_path: Path, cli_env) -> None:
    (tmp_path / "empty").mkdir()
    nothing = run_cli([ENVBUILD, "catalogue", str(tmp_path / "empty"), "-o", str(tmp_path / "site")], env_extra=cli_env)
    assert nothing.returncode == 2 and "no .sif or .sqsh files in this directory" in nothing.stderr
    assert "no images to put in the catalogue" in nothing.stderr and not (tmp_path / "site").exists()
    (tmp_path / "taken").write_text("")
    taken = run_cli([ENVBUILD, "catalogue", str(fixture_image("gzip")), "-o", str(tmp_path / "taken")], env_extra=cli_env)
    assert taken.returncode == 2 and "is a file, not a directory" in taken.stderr and "Traceback" not in taken.stderr


def test_all_good_exits_0(tmp_path: Path, cli_env) -> None:
    result = run_cli([ENVBUILD, "catalogue", str(fixture_image("gzip")), "-o", str(tmp_path / "site")], env_extra=cli_env)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""


def test_a_sandbox_directory_is_one_image(tmp_path: Path, cli_env) -> None:
    from tests.support.inventory_layout import lay_out

    lay_out(tmp_path / "sandbox", "b")
    result = run_cli([ENVBUILD, "catalogue", str(tmp_path / "sandbox"), "-o", str(tmp_path / "site")], env_extra=cli_env)
    assert result.returncode == 0, result.stderr
    image, = json.loads((tmp_path / "site" / "catalogue.json").read_text())["images"]
    assert (image["kind"], image["size"], image["compression"], image["packages"]) == ("sandbox", None, "", 21)
