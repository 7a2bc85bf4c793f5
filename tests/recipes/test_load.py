"""Recipes: every file validates, derived CPU masks match the sites' documented ones, and the cached
light view (what envrun loads) computes exactly what the validated model does."""

from __future__ import annotations

import typing
from collections.abc import Mapping
from pathlib import Path

import pytest

from envbuild.launch.nodefacts import cpu_masks, node_facts
from envbuild.recipes.loadrecipe import available_recipes, load_recipe, recipes_dir, validate_recipe_file
from envbuild.recipes.ops import cores_to_mask, from_cached, parse_core_list
from envbuild.recipes.protocols import SystemRecipe
from envbuild.recipes.schema import dump_for_cache

NAMES = available_recipes()


def test_all_systems_present() -> None:
    assert set(NAMES) >= {"lumi-g", "lumi-c", "puhti", "mahti", "juwels-booster", "jureca-dc", "roihu", "jupiter", "local"}


@pytest.mark.parametrize("name", NAMES)
def test_recipe_validates_and_cites_sources(name: str) -> None:
    path = recipes_dir() / f"{name}.yaml"
    recipe = validate_recipe_file(path, name)
    assert recipe.name == name
    if name != "local":
        assert "https://" in path.read_text(), "site facts must cite their public source"


@pytest.mark.parametrize("name", NAMES)
def test_cached_view_matches_model(name: str) -> None:
    model = validate_recipe_file(recipes_dir() / f"{name}.yaml", name)
    view = from_cached(dump_for_cache(model))
    if model.node is not None:
        assert view.node.usable == model.node.usable
        assert view.node.gpu_cores == model.node.gpu_cores
        assert cpu_masks(node_facts(view, None), view.node.gpus) == cpu_masks(node_facts(model, None), model.node.gpus)
    assert view.env == model.env and view.binds == model.binds
    assert view.pytorch_index_for("cu126") == model.pytorch_index_for("cu126")


@pytest.mark.parametrize("name", NAMES)
def test_cached_view_has_every_member_readers_are_typed_with(name: str) -> None:
    """mypy holds the pydantic model to recipes/protocols.py; the view, whose attributes come from data, is held
    to it here: every member of SystemRecipe and of its parts is there, with the model's value."""
    model = validate_recipe_file(recipes_dir() / f"{name}.yaml", name)
    _same_members(from_cached(dump_for_cache(model)), model, SystemRecipe, name)


def _same_members(view: object, model: object, protocol: type, where: str) -> None:
    hints = typing.get_type_hints(protocol)
    hints.update({member: typing.get_type_hints(value.fget)["return"]
                  for member, value in vars(protocol).items() if isinstance(value, property)})
    methods = [member for member, value in vars(protocol).items() if callable(value) and not member.startswith("_")]
    assert all(callable(getattr(view, member, None)) for member in methods), where
    for member, hint in hints.items():
        assert hasattr(view, member), f"{where}.{member}"
        _same_value(getattr(view, member), getattr(model, member), hint, f"{where}.{member}")


def _same_value(view: object, model: object, hint: object, where: str) -> None:
    parts = [part for part in typing.get_args(hint) if part is not type(None)] if typing.get_origin(hint) is typing.Union \
        or type(hint).__name__ == "UnionType" else [hint]
    hint = parts[0] if len(parts) == 1 else hint
    origin = typing.get_origin(hint)
    nested = typing.get_args(hint)[0 if origin is tuple else -1] if origin in (Mapping, tuple) else hint  # tuple[X, ...]
    if not (isinstance(nested, type) and getattr(nested, "_is_protocol", False)):
        assert view == model, where
    elif model is None:
        assert view is None, where
    elif origin is Mapping:
        assert isinstance(view, Mapping) and isinstance(model, Mapping) and view.keys() == model.keys(), where
        for key in model:
            _same_members(view[key], model[key], nested, f"{where}.{key}")
    elif origin is tuple:
        assert isinstance(view, tuple) and isinstance(model, tuple) and len(view) == len(model), where
        for index, (item, expected) in enumerate(zip(view, model, strict=True)):
            _same_members(item, expected, nested, f"{where}.{index}")
    else:
        _same_members(view, model, nested, where)


def test_lumi_masks_are_the_documented_ones() -> None:
    # LUMI docs (distribution-binding): GCD 0..7 -> cores 49-55, 57-63, 17-23, 25-31, 1-7, 9-15, 33-39, 41-47
    documented = ("0x00fe000000000000,0xfe00000000000000,0x0000000000fe0000,0x00000000fe000000,"
                  "0x00000000000000fe,0x000000000000fe00,0x000000fe00000000,0x0000fe0000000000")
    assert ",".join(cpu_masks(node_facts(load_recipe("lumi-g"), None), 8)) == documented
    # a task that owns two GCDs gets both GCDs' cores: GCD 0+1, 2+3, 4+5, 6+7
    assert cpu_masks(node_facts(load_recipe("lumi-g"), None), 4) == (
        "0xfefe000000000000", "0x00000000fefe0000", "0x000000000000fefe", "0x0000fefe00000000")
    assert cores_to_mask(parse_core_list("1-7"), 64) == "0x00000000000000fe"


def test_core_list_errors() -> None:
    with pytest.raises(ValueError, match="not a core list"):
        parse_core_list("1-x")


def test_broken_recipe_is_located(tmp_path: Path) -> None:
    from envbuild.shared.errors import UsageError

    (tmp_path / "bad.yaml").write_text("name: bad\nnode:\n  gpus: -1\n  cores: 4\n")
    with pytest.raises(UsageError, match=r"bad.yaml:3:3: node.gpus: Input should be greater than or equal to 0"):
        load_recipe("bad", tmp_path)


def test_explain_cites_recipe_file_and_line() -> None:
    recipe = load_recipe("lumi-g")
    text = (recipes_dir() / "lumi-g.yaml").read_text().splitlines()
    cited = recipe.cite("node.gpu_cores")
    where, field = cited.split(" ")
    assert where.startswith("recipes/lumi-g.yaml:") and field == "node.gpu_cores"
    assert text[int(where.rsplit(":", 1)[1]) - 1].strip().startswith("gpu_cores:")


@pytest.mark.parametrize(
    ("environ", "hostname", "expected"),
    [
        ({"ENVBUILD_SYSTEM": "mahti"}, "nid001", "mahti"),
        ({"SLURM_CLUSTER_NAME": "lumi"}, "whatever", "lumi-g"),
        ({"SLURM_CLUSTER_NAME": "envbuild-local"}, "nid001", "local"),
        ({}, "nid001234", "local"),  # nid* is every HPE Cray's name: LUMI only beside /appl/lumi (test_detect_sites)
        ({}, "r01g02", "puhti"),
        ({}, "jwb0097", "juwels-booster"),
        ({"SLURM_CLUSTER_NAME": "roihu"}, "g1234", "roihu"),
        ({}, "roihu-gpu-login2", "roihu"),
        ({"SLURM_CLUSTER_NAME": "jupiter"}, "whatever", "jupiter"),
        ({}, "laptop", "local"),
    ],
)
def test_system_detection(environ: dict[str, str], hostname: str, expected: str) -> None:
    from envbuild.recipes.detect import detect_system

    assert detect_system(environ, hostname, slurm_conf="")[0] == expected


def test_literal_prefix_of_hostname_patterns() -> None:
    from envbuild.recipes.detect import _literal_prefix

    assert [_literal_prefix(p) for p in ("^nid\\d+", "^puhti-", "nid.*", "^ab?c", "^x{2}")] == ["nid", "puhti-", "", "a", ""]


def test_detection_reads_one_cache_file_that_follows_edited_recipes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """envrun detects the site from every recipe's `detect`, kept in one cache file keyed by all recipe files."""
    from envbuild.recipes.detect import detect_system
    from envbuild.recipes.loadrecipe import detection_table

    recipes = tmp_path / "recipes"
    recipes.mkdir()
    for name in ("local", "lumi-g"):
        (recipes / f"{name}.yaml").write_text((recipes_dir() / f"{name}.yaml").read_text())
    monkeypatch.setenv("ENVBUILD_RECIPES", str(recipes))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # envrun's own cache: cache/envrun
    assert dict(detection_table())["lumi-g"]["slurm_cluster_names"] == ["lumi"]
    assert len(list((tmp_path / "cache" / "envrun").glob("detect-*.marshal"))) == 1
    assert detect_system({"SLURM_CLUSTER_NAME": "lumi"}, "uan01")[0] == "lumi-g"
    edited = (recipes / "lumi-g.yaml").read_text().replace("slurm_cluster_names: [lumi]", "slurm_cluster_names: [lumi2]")
    (recipes / "lumi-g.yaml").write_text(edited)
    assert detect_system({"SLURM_CLUSTER_NAME": "lumi2"}, "x")[0] == "lumi-g"
    assert detect_system({"SLURM_CLUSTER_NAME": "lumi"}, "x")[0] == "local"


def test_a_recipe_file_given_as_a_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--system ./mysite.yaml (what `envrun recipe draft -o` writes): loaded, cached under its path and content, and
    named to another envrun (a batch job's) by its file; a named recipe by its name."""
    from envbuild.recipes.detect import resolve_recipe
    from envbuild.recipes.ops import system_argument

    monkeypatch.setenv("ENVBUILD_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mysite.yaml").write_text((recipes_dir() / "puhti.yaml").read_text().replace("name: puhti", "name: mysite"))
    for given in ("mysite.yaml", "./mysite.yaml", str(tmp_path / "mysite.yaml")):
        recipe, why = resolve_recipe(given, {})
        assert recipe.name == "mysite" and recipe.node is not None and recipe.node.gpus == 4
        assert why == f"--system {given}" and system_argument(recipe) == str(tmp_path / "mysite.yaml")
        assert recipe.cite("node.gpus").startswith(f"{tmp_path.name}/mysite.yaml:")
    assert system_argument(load_recipe("puhti")) == "puhti"
    assert resolve_recipe("puhti", {})[1] == "--system"


@pytest.mark.parametrize(("file", "content", "message", "fix"), [
    ("missing.yaml", None, "cannot read the recipe file missing.yaml: No such file or directory", "envrun recipe draft"),
    ("other.yaml", "name: mysite\nnode: host\n", "name is 'mysite' but the file is named other.yaml",
     "set `name: other` in it, or name the file mysite.yaml"),
    ("broken.yaml", "name: broken\nnode: {gpus: -1, cores: 4}\n", "broken.yaml:2:", "fix the recipe file"),
    ("syntax.yaml", "name: syntax\nnode: [\n", "syntax.yaml:", ""),
])
def test_a_bad_recipe_file_is_refused_with_where_and_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, file: str,
                                                          content: str | None, message: str, fix: str) -> None:
    from envbuild.shared.errors import UsageError

    monkeypatch.setenv("ENVBUILD_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    if content is not None:
        (tmp_path / file).write_text(content)
    with pytest.raises(UsageError) as caught:
        load_recipe(file)
    assert message in caught.value.message and fix in (caught.value.hint or "")
    assert caught.value.exit_code == 2


def test_no_recipe_under_recipes_is_a_draft() -> None:
    """A site reviews a drafted recipe (`envrun recipe draft`) and removes its DRAFTED note before it joins recipes/
    (docs/concepts/recipes.md, "Drafting a recipe")."""
    from envbuild.slurm.recipedraft import DRAFT_MARK

    drafts = [path.name for path in sorted(recipes_dir().glob("*.yaml")) if DRAFT_MARK in path.read_text()]
    assert drafts == []
