"""Finding the environment envrun runs in (envbuild.launch.project): the command line, else $ENVRUN_IMAGE
(+ $ENVRUN_OVERLAYS), else the nearest envrun.yaml, else the one *.sif here; every place looked at when
nothing is found; the project file validated once and read back from its cache."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from envbuild.launch import config as config_module
from envbuild.launch.config import read_settings, settings_for
from envbuild.launch.project import find_environment, find_project_file, project_settings
from envbuild.shared.errors import UsageError

PROJECT = """\
# the training project
image: build/env.sif
overlays: [build/extra.sqsh, /abs/dev.sqsh]
binds: [data, "/scratch/x:/x"]
env: {HF_HOME: hf}
systems:
  lumi-g: {binds: [flash], env: {TORCH_HOME: /flash/torch}}
"""


@pytest.fixture(autouse=True)
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # envrun's own cache: cache/envrun
    return tmp_path / "cache"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    (root / "src" / "deep").mkdir(parents=True)
    (root / "envrun.yaml").write_text(PROJECT)
    return root


def find(cwd: Path, environ: dict[str, str] | None = None, image: str | None = None, overlays: tuple[str, ...] = ()):
    return find_environment(image=image, overlays=overlays, environ=environ or {}, cwd=str(cwd))


def test_the_command_line_wins(project: Path) -> None:
    found = find(project / "src", {"ENVRUN_IMAGE": "/e.sif"}, image="my.sif", overlays=("a.sqsh", "/b.sqsh"))
    assert (found.image, found.overlays, found.source) == (f"{project}/src/my.sif", (f"{project}/src/a.sqsh", "/b.sqsh"),
                                                           "the command line")
    assert found.project_file == f"{project}/envrun.yaml", "the project's binds and env still apply"
    only_overlay = find(project, overlays=("a.sqsh",))
    assert only_overlay.image is None and only_overlay.overlays == (f"{project}/a.sqsh",)


def test_then_the_environment_variables(project: Path) -> None:
    found = find(project, {"ENVRUN_IMAGE": "/e.sif", "ENVRUN_OVERLAYS": "/o1.sqsh::rel.sqsh"})
    assert (found.image, found.overlays, found.source) == ("/e.sif", ("/o1.sqsh", f"{project}/rel.sqsh"), "$ENVRUN_IMAGE")
    assert find(project, {"ENVRUN_IMAGE": "", "ENVRUN_OVERLAYS": "/o.sqsh"}).source == "$ENVRUN_OVERLAYS"


def test_then_the_nearest_project_file_with_paths_relative_to_it(project: Path) -> None:
    found = find(project / "src" / "deep")
    assert found.image == f"{project}/build/env.sif"
    assert found.overlays == (f"{project}/build/extra.sqsh", "/abs/dev.sqsh")
    assert found.source == found.project_file == f"{project}/envrun.yaml"
    nearer = project / "src" / "envrun.yaml"
    nearer.write_text("image: other.sif\n")
    assert find(project / "src" / "deep").image == f"{project}/src/other.sif"


def test_project_binds_and_env_per_system(project: Path) -> None:
    found = find(project)
    assert project_settings(found, "local") == ((f"{project}/data", "/scratch/x:/x"), {"HF_HOME": "hf"})
    assert project_settings(found, "lumi-g") == ((f"{project}/data", "/scratch/x:/x", f"{project}/flash"),
                                                 {"HF_HOME": "hf", "TORCH_HOME": "/flash/torch"})


def test_then_the_one_sif_in_the_working_directory(tmp_path: Path) -> None:
    work = tmp_path / "w"
    work.mkdir()
    (work / "env.sif").write_bytes(b"")
    (work / "notes.txt").write_text("")
    found = find(work)
    assert (found.image, found.overlays, found.source) == (f"{work}/env.sif", (), f"the only .sif in {work}")
    (work / "b.sif").write_bytes(b"")
    with pytest.raises(UsageError, match=re.escape(f"no image given, and {work} holds 2 images: b.sif, env.sif")) as caught:
        find(work)
    assert caught.value.hint == "pick one with --image (e.g. --image b.sif), or name it in envrun.yaml (image: b.sif)"


def test_a_project_file_without_an_image_falls_through(tmp_path: Path) -> None:
    (tmp_path / "envrun.yaml").write_text("binds: [/data]\n")
    (tmp_path / "env.sif").write_bytes(b"")
    found = find(tmp_path)
    assert found.image == f"{tmp_path}/env.sif" and found.project == {
        "binds": ["/data"], "env": {}, "systems": {}, "image": None, "overlays": [],
        "batch": {"account": None, "partition": None, "time": None, "launcher": None, "requeue_max": None}}


def test_nothing_found_lists_every_place_looked_at(tmp_path: Path) -> None:
    work = tmp_path / "a" / "b"
    work.mkdir(parents=True)
    with pytest.raises(UsageError) as caught:
        find(work)
    lines = caught.value.message.splitlines()
    assert lines[0] == "no image to run in; envrun looked at:"
    walk = find_project_file(str(work))
    checked = walk.checked
    assert checked[:3] == [f"{work}/envrun.yaml", f"{tmp_path}/a/envrun.yaml", f"{tmp_path}/envrun.yaml"]
    assert [f"  {path}: absent" for path in checked] == lines[3:3 + len(checked)]
    assert lines[3 + len(checked):-1] == ([f"  (no parent looked at: {walk.stopped})"] if walk.stopped else [])
    assert lines[-1] == f"  {work}/*.sif: none"


@pytest.mark.parametrize(("text", "located"), [
    ("image: [a, b]\n", "1:1: image: Input should be a valid string"),
    ("images: x.sif\n", "1:1: images: Extra inputs are not permitted"),
    ("overlays:\n  - a.sqsh\n  - {x: 1}\n", "3:5: overlays.1: Input should be a valid string"),
    ("image: a.sif\nimage: b.sif\n", "2:1: envrun.yaml: YAML syntax: duplicate key 'image' (key 'image' first given on line 1)"),
])
def test_an_invalid_project_file_is_located(tmp_path: Path, text: str, located: str) -> None:
    (tmp_path / "envrun.yaml").write_text(text)
    with pytest.raises(UsageError) as caught:
        find(tmp_path, image="x.sif")
    assert caught.value.message == f"{tmp_path}/envrun.yaml:{located}"
    assert caught.value.hint


def test_the_project_file_is_validated_only_when_it_changed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "envrun.yaml"
    path.write_text(PROJECT)
    first = read_settings(str(path), project=True)

    def no_validation(*_: object, **__: object) -> None:
        raise AssertionError("validated again although the file did not change")

    monkeypatch.setattr(config_module, "validate_file", no_validation)
    assert read_settings(str(path), project=True) == first
    assert settings_for(first, "lumi-g")[1] == {"HF_HOME": "hf", "TORCH_HOME": "/flash/torch"}
    path.write_text(PROJECT.replace("hf}", "hf2}"))
    with pytest.raises(AssertionError, match="validated again"):
        read_settings(str(path), project=True)
