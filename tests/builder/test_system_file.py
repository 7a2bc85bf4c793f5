"""A spec whose `system:` is a recipe file's path (`envrun recipe draft -o`): the file's content enters the build's
identity as a recipe of recipes/ does (the image key, the record, the lock's recipe digest), so editing it builds anew
and the no-op light check misses; the run wrappers get the recipe by its absolute file, whatever the working
directory. The store and host facts are the session tests' (tests/builder/test_buildsession.py)."""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import pytest

from envbuild.builder.plan.actions import WriteRunWrappers
from envbuild.builder.plan.imageplan import wrappers_step
from envbuild.builder.plan.layers import plan_layers
from envbuild.builder.plan.record import build_record
from envbuild.builder.sessions.buildrequest import BuildOptions
from envbuild.builder.sessions.imagesession import BuildSession
from envbuild.builder.sessions.lockdecision import torch_index_for
from envbuild.envspec.loadspec import LoadedSpec, load_spec
from envbuild.lock.lockmodel import lock_inputs
from envbuild.shared.treedigest import file_digest
from tests.builder.test_buildsession import BuildStarted, complete_base, request_for, stop_at_build, write_sif
from tests.builder.test_noop_record import full_path, light
from tests.conftest import REPO
from tests.support.plan_fixtures import session_store

SPEC = """\
name: tiny
system: {system}
base: debootstrap:bookworm
python:
  packages:
    - six
"""


def site_recipe(path: Path) -> Path:
    """The local recipe (this machine's own facts, so the architecture check passes anywhere), as a site's file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text((REPO / "recipes" / "local.yaml").read_text().replace("name: local", f"name: {path.stem}"))
    return path


def write_spec(directory: Path, system: str) -> LoadedSpec:
    path = directory / "tiny.yaml"
    path.write_text(SPEC.format(system=system))
    return load_spec(path)


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return session_store(tmp_path, monkeypatch)


def test_the_recipe_files_content_is_in_the_image_key_and_the_record(tmp_path: Path, store: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    recipe = site_recipe(tmp_path / "site" / "mysite.yaml")
    (tmp_path / "proj").mkdir()
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    loaded = write_spec(tmp_path / "proj", "../site/mysite.yaml")
    request = request_for(loaded, store, tmp_path / "out" / "tiny.sif")
    assert request.recipe.name == "mysite"
    assert request.recipe_digest == file_digest(str(recipe)) != ""
    record = build_record(request, "uv", plan_layers(request))
    assert record["system"] == "../site/mysite.yaml"  # as the spec says: verify compares it with the spec's
    assert record["recipe"] == {"name": "mysite", "sha256": request.recipe_digest}
    [wrappers] = wrappers_step(request, "/venv/bin").actions
    assert isinstance(wrappers, WriteRunWrappers) and wrappers.system == str(recipe)  # read again by the wrappers step
    lock = lock_inputs(loaded.spec, torch_index_for(loaded))
    assert lock.system == "../site/mysite.yaml"

    key = plan_layers(request).image_key
    recipe.write_text(recipe.read_text() + "# edited\n")
    edited = request_for(load_spec(tmp_path / "proj" / "tiny.yaml"), store, tmp_path / "out" / "tiny.sif")
    assert edited.recipe_digest == file_digest(str(recipe)) != request.recipe_digest
    assert plan_layers(edited).image_key != key


def test_the_same_file_named_or_by_path_reads_the_same_content(tmp_path: Path, store: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A recipe of recipes/ by its name and the same file by its path: the same recipe digest (the spec text differs)."""
    shutil.copytree(REPO / "recipes", tmp_path / "recipes")
    monkeypatch.setenv("ENVBUILD_RECIPES", str(tmp_path / "recipes"))
    named = request_for(write_spec(tmp_path, "local"), store, tmp_path / "tiny.sif")
    by_path = request_for(write_spec(tmp_path, "./recipes/local.yaml"), store, tmp_path / "tiny.sif")
    assert named.recipe_digest == by_path.recipe_digest == file_digest(str(tmp_path / "recipes" / "local.yaml"))


def test_an_edited_recipe_file_makes_the_output_stale(tmp_path: Path, store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    recipe = site_recipe(tmp_path / "site" / "mysite.yaml")
    loaded = write_spec(tmp_path, "site/mysite.yaml")
    output = tmp_path / "out" / "tiny.sif"
    output.parent.mkdir()
    request = request_for(loaded, store, output)
    complete_base(request)
    write_sif(tmp_path / "tree", output, {"layers": {"image": plan_layers(request).image_key}})
    stop_at_build(monkeypatch)
    out = io.StringIO()
    assert BuildSession(loaded, BuildOptions(output=output, cache_dir=store), out=out).build() == output
    assert f"{output} is up to date" in out.getvalue()
    recipe.write_text(recipe.read_text() + "# edited\n")
    with pytest.raises(BuildStarted):
        BuildSession(load_spec(tmp_path / "tiny.yaml"), BuildOptions(output=output, cache_dir=store), out=io.StringIO()).build()


def test_the_no_op_light_check_misses_after_the_recipe_file_changed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The light check (envbuild.commands.uptodate) records the recipe file the build read and misses once it
    changed; the full path then builds."""
    shutil.copytree(REPO / "recipes", tmp_path / "recipes")
    monkeypatch.setenv("ENVBUILD_RECIPES", str(tmp_path / "recipes"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    store = session_store(tmp_path, monkeypatch)
    stop_at_build(monkeypatch)
    recipe = site_recipe(tmp_path / "site" / "mysite.yaml")
    loaded = write_spec(tmp_path, "site/mysite.yaml")
    output = tmp_path / "out" / "tiny.sif"
    output.parent.mkdir()
    request = request_for(loaded, store, output)
    complete_base(request)
    write_sif(tmp_path / "tree", output, {"layers": {"image": plan_layers(request).image_key}})
    assert "is up to date" in full_path(tmp_path, output)
    assert light() is not None
    recipe.write_text(recipe.read_text() + "# edited\n")
    assert light() is None
    assert full_path(tmp_path, output).endswith("<build started>")
