"""System recipes: per-site knowledge (GPUs, cores, binds, env, wheel indexes, launch rules) kept as
data in recipes/*.yaml, each fact citing its public source in a comment there.

Loading validates a recipe once (pydantic, envbuild.recipeschema) and caches the result as JSON keyed by
the file's content; later loads read the JSON into a light view, so envrun starts without pydantic/YAML.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from envbuild import __version__
from envbuild.errors import UsageError
from envbuild.recipeops import SOURCE_KEY, RecipeView, from_json

if TYPE_CHECKING:
    from envbuild.recipeschema import Recipe

# Bump when the cached JSON's layout changes, so older cache files are not read.
CACHE_FORMAT = 2


def recipes_dir() -> Path:
    """$ENVBUILD_RECIPES, else the recipes shipped inside the package, else the checkout's recipes/."""
    override = os.environ.get("ENVBUILD_RECIPES")
    if override:
        return Path(override)
    packaged = Path(__file__).with_name("_recipes")
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parent.parent / "recipes"


def available_recipes(directory: Path | None = None) -> list[str]:
    directory = directory or recipes_dir()
    return sorted(p.stem for p in directory.glob("*.yaml"))


def _cache_file(name: str, content: bytes) -> Path:
    from envbuild.runtime import default_cache_dir

    digest = hashlib.sha256(content + f"{__version__}/{CACHE_FORMAT}".encode()).hexdigest()[:20]
    return default_cache_dir() / "recipes" / f"{name}-{digest}.json"


def load_recipe(name: str, directory: Path | None = None) -> RecipeView:
    """The validated recipe `name`: from the JSON cache when the file is unchanged, else validated now."""
    directory = directory or recipes_dir()
    path = directory / f"{name}.yaml"
    try:
        content = path.read_bytes()
    except OSError:
        known = ", ".join(available_recipes(directory)) or "none"
        raise UsageError(
            f"no system recipe named {name!r} in {directory}",
            f"use one of: {known} (or add recipes/{name}.yaml)",
        ) from None
    cache = _cache_file(name, content)
    try:
        return from_json(json.loads(cache.read_text(encoding="utf-8")))
    except (OSError, ValueError):
        pass
    data = _cacheable(path, name)
    _write_cache(cache, data)
    return from_json(data)


def _cacheable(path: Path, name: str) -> dict[str, Any]:
    """The validated recipe as JSON data, with the line of every field for `envrun --explain`."""
    from envbuild.recipeschema import dump_for_cache
    from envbuild.yamlsource import load_yaml_file

    document = load_yaml_file(path)
    data = dump_for_cache(validate_recipe_file(path, name, document))
    data[SOURCE_KEY] = {
        "file": str(path),
        "lines": {".".join(map(str, loc)): pos.line for loc, pos in document.positions.items() if loc},
    }
    return data


def validate_recipe_file(path: Path, name: str, document: Any = None) -> Recipe:
    from pydantic import ValidationError

    from envbuild.recipeschema import Recipe
    from envbuild.yamlsource import load_yaml_file

    document = document or load_yaml_file(path)
    try:
        recipe = Recipe.model_validate(document.data)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = tuple(first["loc"])
        pos = document.position_of(loc)
        field = ".".join(str(part) for part in loc)
        raise UsageError(f"{path}:{pos.line}:{pos.column}: {field}: {first['msg']}", "fix the recipe file") from None
    if recipe.name != name:
        raise UsageError(f"{path}: name is {recipe.name!r} but the file is named {name}.yaml", "make them agree")
    return recipe


def _write_cache(cache: Path, data: dict[str, Any]) -> None:
    """Best effort: an unwritable cache only costs speed."""
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        partial = cache.with_name(f".{cache.name}.{os.getpid()}")
        partial.write_text(json.dumps(data), encoding="utf-8")
        os.replace(partial, cache)
    except OSError:
        pass
