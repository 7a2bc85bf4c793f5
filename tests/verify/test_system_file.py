"""`envbuild verify IMAGE SPEC` where the spec's `system:` is a recipe file's path: the record keeps it as written,
so the spec it was built from matches from any working directory (and after the file was moved or removed: verify
compares the spec, the recipe's content is the build's key), and another file is named as a changed system."""

from __future__ import annotations

from pathlib import Path

import pytest

from envbuild.recipes.loadrecipe import recipes_dir
from envbuild.verify.imagecheck import render_verification, verify_image
from tests.verify.test_verify import diffs, make_image, spec_text, write_spec


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    (tmp_path / "site").mkdir()
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    recipe = tmp_path / "site" / "mysite.yaml"
    recipe.write_text((recipes_dir() / "local.yaml").read_text().replace("name: local", "name: mysite"))
    return recipe


def test_the_spec_it_was_built_from_matches(tmp_path: Path, site: Path) -> None:
    image = make_image(tmp_path / "img", system="../site/mysite.yaml")
    spec = write_spec(tmp_path / "envs", spec_text(system="../site/mysite.yaml"))
    result = verify_image(image, spec)
    assert result.ok, render_verification(result)
    site.unlink()
    assert verify_image(image, spec).ok


def test_another_recipe_file_is_a_changed_system(tmp_path: Path, site: Path) -> None:
    image = make_image(tmp_path / "img", system="../site/mysite.yaml")
    spec = write_spec(tmp_path / "envs", spec_text(system="../site/other.yaml"))
    assert diffs(verify_image(image, spec))[1:] == [
        "system: the image was built for ../site/mysite.yaml, the spec says ../site/other.yaml"]
