"""The writer of a project's envrun.yaml (envbuild.launch.projectfile): a new file, envbuild's own values
updated, values set by hand kept with a message, the overlays list, and the user's comments, other keys
and order left as they were; what it writes is what envrun's discovery reads back."""

from __future__ import annotations

from pathlib import Path

import pytest

from envbuild.launch.project import find_environment
from envbuild.launch.projectfile import HEADER, render, update_project_file

SPEC = "envs/x.yaml"


@pytest.fixture(autouse=True)
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # envrun's own cache: cache/envrun


@pytest.fixture
def proj(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "proj"
    root.mkdir()
    monkeypatch.chdir(root)  # envbuild build runs in the project: the spec's path is relative to it
    return root


def update(proj: Path, image: str, overlays: tuple[str, ...] = ()) -> list[str]:
    return update_project_file(proj, image=image, overlays=overlays, spec=SPEC)


def test_a_new_file_names_what_was_built_relative_to_it(proj: Path) -> None:
    messages = update(proj, str(proj / "build/base.sif"), (str(proj / "build/env.sqsh"),))
    assert (proj / "envrun.yaml").read_text() == HEADER + (
        "image: build/base.sif  # set by envbuild build envs/x.yaml: build/base.sif\n"
        "overlays: [build/env.sqsh]  # set by envbuild build envs/x.yaml: [build/env.sqsh]\n")
    assert messages == [f"wrote {proj}/envrun.yaml (image: build/base.sif, overlays: [build/env.sqsh]): "
                        "`envrun COMMAND` here runs in it"]
    found = find_environment(image=None, overlays=(), environ={}, cwd=str(proj / "build"))
    assert (found.image, found.overlays) == (f"{proj}/build/base.sif", (f"{proj}/build/env.sqsh",))


def test_a_path_outside_the_project_stays_absolute(proj: Path) -> None:
    update(proj, "/appl/local/containers/sif-images/lumi-pytorch.sif", ("env.sqsh",))
    text = (proj / "envrun.yaml").read_text()
    assert "image: /appl/local/containers/sif-images/lumi-pytorch.sif  # set by" in text
    assert "overlays: [env.sqsh]  # set by" in text


def test_envbuilds_own_value_is_updated(proj: Path) -> None:
    update(proj, "old.sif")
    assert update(proj, "new.sif") == [f"{proj}/envrun.yaml: image: old.sif -> new.sif"]
    assert "image: new.sif  # set by envbuild build envs/x.yaml: new.sif\n" in (proj / "envrun.yaml").read_text()
    assert update(proj, "new.sif") == [], "nothing to say when nothing changed"


def test_a_value_set_by_hand_is_kept(proj: Path) -> None:
    update(proj, "my.sif")
    path = proj / "envrun.yaml"
    path.write_text(path.read_text().replace("image: my.sif ", "image: other.sif "))  # edited, envbuild's comment left
    before = path.read_text()
    assert update(proj, "my.sif") == [f"{proj}/envrun.yaml: kept image: other.sif set by hand (envbuild built my.sif)"]
    assert path.read_text() == before
    path.write_text("image: mine.sif  # my base\n")
    assert update(proj, "my.sif") == [f"{proj}/envrun.yaml: kept image: mine.sif set by hand (envbuild built my.sif)"]
    assert path.read_text() == "image: mine.sif  # my base\n"


def test_the_overlays_list(proj: Path) -> None:
    update(proj, "base.sif", ("a.sqsh",))
    assert update(proj, "base.sif", ("a.sqsh", "b b.sqsh")) == [
        f'{proj}/envrun.yaml: overlays: [a.sqsh] -> [a.sqsh, "b b.sqsh"]']
    assert 'overlays: [a.sqsh, "b b.sqsh"]  # set by envbuild build envs/x.yaml: [a.sqsh, "b b.sqsh"]\n' in \
        (proj / "envrun.yaml").read_text()
    assert find_environment(image=None, overlays=(), environ={}, cwd=str(proj)).overlays == (
        f"{proj}/a.sqsh", f"{proj}/b b.sqsh")
    # rebuilding the base alone keeps them (envrun checks they still fit); another image drops envbuild's
    assert update(proj, "base.sif") == []
    assert update(proj, "other.sif") == [
        f"{proj}/envrun.yaml: image: base.sif -> other.sif",
        f'{proj}/envrun.yaml: removed overlays: [a.sqsh, "b b.sqsh"] (envbuild built them for the previous image)']
    assert "overlays" not in (proj / "envrun.yaml").read_text()


def test_a_block_list_envbuild_wrote_is_replaced_whole(proj: Path) -> None:
    path = proj / "envrun.yaml"
    path.write_text("overlays:  # set by envbuild build envs/x.yaml: [a.sqsh]\n- a.sqsh\n\n# data\nbinds: [/d]\n")
    update(proj, "base.sif", ("b.sqsh",))
    assert path.read_text() == (
        "image: base.sif  # set by envbuild build envs/x.yaml: base.sif\n"
        "overlays: [b.sqsh]  # set by envbuild build envs/x.yaml: [b.sqsh]\n\n# data\nbinds: [/d]\n")


def test_comments_other_keys_and_order_are_preserved(proj: Path) -> None:
    path = proj / "envrun.yaml"
    path.write_text("# my project\nbinds:\n  - /scratch/data   # the corpus\nenv: {HF_HOME: /scratch/hf}\n"
                    "systems:\n  lumi-g: {binds: [/flash]}\n# end")
    path.chmod(0o640)
    update(proj, "env.sif", ("env.sqsh",))
    assert path.read_text() == (
        "# my project\nbinds:\n  - /scratch/data   # the corpus\nenv: {HF_HOME: /scratch/hf}\n"
        "systems:\n  lumi-g: {binds: [/flash]}\n# end\n"
        "image: env.sif  # set by envbuild build envs/x.yaml: env.sif\n"
        "overlays: [env.sqsh]  # set by envbuild build envs/x.yaml: [env.sqsh]\n")
    assert path.stat().st_mode & 0o777 == 0o640
    update(proj, "new.sif")
    assert path.read_text().startswith("# my project\nbinds:\n  - /scratch/data   # the corpus\n")


def test_a_file_that_does_not_parse_is_left_alone(proj: Path) -> None:
    path = proj / "envrun.yaml"
    path.write_text("image: [a\n")
    messages = update(proj, "env.sif")
    assert len(messages) == 1 and messages[0].startswith(f"{proj}/envrun.yaml: not updated, it does not parse (")
    assert path.read_text() == "image: [a\n"


@pytest.mark.parametrize(("value", "shown"), [("a.sif", "a.sif"), ("true", '"true"'), ("a b.sif", '"a b.sif"'),
                                              ("x#y", '"x#y"'), (["a", "b: c"], '[a, "b: c"]')])
def test_render_writes_yaml_that_reads_back(value: object, shown: str) -> None:
    import yaml

    assert render(value) == shown and yaml.safe_load(shown) == value
