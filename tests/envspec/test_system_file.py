"""`system:` naming a recipe file (what `envrun recipe draft -o` writes) rather than a recipe of recipes/: read from
the spec file's directory, whatever the working directory, by the loader --system uses, and refused with a located
problem and a fix when it is missing, a directory, not a regular file or not a valid recipe."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from envbuild.envspec.loadspec import load_spec
from envbuild.recipes.loadrecipe import recipes_dir
from envbuild.shared.errors import SpecError

SPEC = """\
name: train
system: {system}
base: debootstrap:bookworm
python:
  pytorch: {{version: "2.13.0"}}
"""


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """tmp/proj/envs/ for specs and tmp/proj/site/mysite.yaml, a recipe (puhti's, renamed: CUDA by default); the
    working directory is tmp/elsewhere, so that a path read from it would miss."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    (tmp_path / "proj" / "envs").mkdir(parents=True)
    (tmp_path / "proj" / "site").mkdir()
    (tmp_path / "proj" / "site" / "mysite.yaml").write_text(
        (recipes_dir() / "puhti.yaml").read_text().replace("name: puhti", "name: mysite"))
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    return tmp_path / "proj"


def spec_naming(project: Path, system: str) -> Path:
    path = project / "envs" / "train.yaml"
    path.write_text(SPEC.format(system=system))
    return path


@pytest.mark.parametrize("written", ["../site/mysite.yaml", "./../site/mysite.yaml", "{project}/site/mysite.yaml"])
def test_a_recipe_file_is_read_from_the_spec_files_directory(project: Path, written: str) -> None:
    loaded = load_spec(spec_naming(project, written.format(project=project)))
    assert loaded.spec.system == written.format(project=project)  # as written: the record and the lock keep it
    assert loaded.recipe_ref == str(project / "site" / "mysite.yaml")
    assert loaded.spec.python.pytorch is not None and loaded.spec.python.pytorch.variant == "cuda126"
    assert loaded.torch_variant_origin is not None and "the mysite recipe's default_variant" in loaded.torch_variant_origin
    assert "site/mysite.yaml:" in loaded.torch_variant_origin


def test_a_bare_file_name_is_beside_the_spec_and_home_is_expanded(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (project / "envs" / "mysite.yaml").write_text((project / "site" / "mysite.yaml").read_text())
    assert load_spec(spec_naming(project, "mysite.yaml")).recipe_ref == str(project / "envs" / "mysite.yaml")
    monkeypatch.setenv("HOME", str(project))
    assert load_spec(spec_naming(project, "~/site/mysite.yaml")).recipe_ref == str(project / "site" / "mysite.yaml")


def test_a_named_recipe_stays_a_name(project: Path) -> None:
    loaded = load_spec(spec_naming(project, "puhti"))
    assert loaded.recipe_ref == "puhti" and loaded.spec.python.pytorch is not None
    assert loaded.spec.python.pytorch.variant == "cuda126"


def test_the_working_directory_is_not_where_it_is_read_from(project: Path) -> None:
    """The same relative path from the working directory holds a recipe: the spec's own directory still rules."""
    Path("mysite.yaml").write_text((project / "site" / "mysite.yaml").read_text())
    spec = spec_naming(project, "./mysite.yaml")
    with pytest.raises(SpecError) as caught:
        load_spec(spec)
    [problem] = caught.value.problems
    assert (problem.file, problem.line, problem.field) == (str(spec), 2, "system")
    assert problem.message == (f"the recipe file './mysite.yaml' (resolved to {project / 'envs' / 'mysite.yaml'}, from "
                               "the spec file's directory) does not exist")
    assert f"read from the spec file's directory {project / 'envs'}" in (problem.hint or "")
    assert f"envrun recipe draft -o {project / 'envs' / 'mysite.yaml'}" in (problem.hint or "")


def _fifo(site: Path) -> None:
    os.mkfifo(site / "fifo.yaml")


BAD: dict[str, tuple[str, object, str, str]] = {
    # name: (system:, what is at site/FILE (text, a maker, or None), message part, fix part)
    "missing": ("../site/none.yaml", None, "does not exist", "envrun recipe draft -o"),
    "a directory": ("../site/dir.yaml", "dir", "is a directory", "correct the path"),
    "not a regular file": ("../site/fifo.yaml", _fifo, "is not a regular file", "correct the path"),
    "a link to nothing": ("../site/dangling.yaml", "dangling", "is a symbolic link to nothing", "correct the path"),
    "an invalid field": ("../site/broken.yaml", "name: broken\nnode: {gpus: -1, cores: 4}\n",
                         "'../site/broken.yaml' is not a valid system recipe: {site}/broken.yaml:2:", "fix the recipe file"),
    "YAML syntax": ("../site/syntax.yaml", "name: syntax\nnode: [\n",
                    "'../site/syntax.yaml' is not a valid system recipe: {site}/syntax.yaml:", "indentation"),
    "another name inside": ("../site/other.yaml", "name: mysite\nnode: host\n",
                            "name is 'mysite' but the file is named other.yaml", "set `name: other` in it"),
    "not a mapping": ("../site/list.yaml", "- a\n- b\n", "is not a valid system recipe: {site}/list.yaml:1:", "fix the recipe"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_recipe_file_is_a_located_problem_with_a_fix(project: Path, case: str) -> None:
    system, made, message, fix = BAD[case]
    site = project / "site"
    if made == "dir":
        (site / "dir.yaml").mkdir()
    elif made == "dangling":
        (site / "dangling.yaml").symlink_to(site / "gone.yaml")
    elif callable(made):
        made(site)
    elif isinstance(made, str):
        (site / system.rsplit("/", 1)[1]).write_text(made)
    spec = spec_naming(project, system)
    with pytest.raises(SpecError) as caught:
        load_spec(spec)
    assert caught.value.exit_code == 2
    [problem] = caught.value.problems
    assert (problem.file, problem.line, problem.column, problem.field) == (str(spec), 2, 1, "system")
    assert message.format(site=site) in problem.message, problem.render()
    assert fix in (problem.hint or ""), problem.render()


def test_without_the_host_check_a_missing_file_is_no_problem(project: Path) -> None:
    """verify and the embedded spec load without the host check: the spec still loads (cpu, no recipe to take a
    default from), as with an unknown recipe name."""
    loaded = load_spec(spec_naming(project, "../site/none.yaml"), check_host=False)
    assert loaded.spec.python.pytorch is not None and loaded.spec.python.pytorch.variant == "cpu"


def test_an_unknown_name_suggests_a_recipe_file(project: Path) -> None:
    with pytest.raises(SpecError) as caught:
        load_spec(spec_naming(project, "mysite"))
    [problem] = caught.value.problems
    assert problem.message.startswith("no system recipe named 'mysite'")
    assert "a recipe file's path (system: ./mysite.yaml, read from the spec file's directory" in (problem.hint or "")
