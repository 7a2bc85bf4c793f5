"""System recipes: per-site knowledge (GPUs, cores, binds, env, wheel indexes, launch rules) kept as
data in recipes/*.yaml, each fact citing its public source in a comment there.

Loading validates a recipe once (pydantic, envbuild.recipes.schema) and caches the result keyed by the
file's content; later loads read the cache into a light view, so envrun starts without pydantic/YAML.
The cache is envbuild's private file in `marshal` form: unlike json (whose decoder imports re) it costs
no import, and the key includes the Python version, the only one whose marshal format it must read.
"""

from __future__ import annotations

import marshal
import os
import sys
import zlib

from envbuild import __version__
from envbuild.errors import UsageError
from envbuild.recipes.ops import SOURCE_KEY, RecipeView, from_cached

TYPE_CHECKING = False  # pathlib, typing and hashlib stay out of envrun's start-up
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

    from envbuild.recipes.schema import Recipe

# Bump when the cached JSON's layout changes, so older cache files are not read.
CACHE_FORMAT = 7


def recipes_dir() -> Path:
    """$ENVBUILD_RECIPES, else the recipes shipped inside the package, else the checkout's recipes/."""
    from pathlib import Path

    return Path(_recipes_dir_path())


def _recipes_dir_path() -> str:
    override = os.environ.get("ENVBUILD_RECIPES")
    if override:
        return override
    # This module lives in envbuild/recipes/; the wheel ships the recipes as envbuild/_recipes.
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    packaged = os.path.join(package, "_recipes")
    if os.path.isdir(packaged):
        return packaged
    return os.path.join(os.path.dirname(os.path.realpath(package)), "recipes")


def available_recipes(directory: Path | str | None = None) -> list[str]:
    directory = str(directory or _recipes_dir_path())
    try:
        return sorted(entry[: -len(".yaml")] for entry in os.listdir(directory) if entry.endswith(".yaml"))
    except OSError:
        return []


def _cache_file(name: str, content: bytes) -> str:
    from envbuild.host.runtime import cache_dir_path

    # crc32 rather than sha256: the key only has to notice an edited file, and hashlib's import costs
    # envrun 5 ms. The size and the version make accidental reuse of a stale entry practically impossible.
    stamp = f"{__version__}/{CACHE_FORMAT}/{sys.version_info[0]}.{sys.version_info[1]}".encode()
    key = f"{zlib.crc32(content):08x}{len(content):x}-{zlib.crc32(stamp):08x}"
    return os.path.join(cache_dir_path(), "recipes", f"{name}-{key}.marshal")


def _recipes_cache_dir() -> str:
    from envbuild.host.runtime import cache_dir_path

    return os.path.join(cache_dir_path(), "recipes")


def detection_table(directory: Path | str | None = None) -> list[tuple[str, dict[str, Any]]]:
    """(name, `detect` data) of every recipe, for envrun's detection of the site: one cache file for all of them,
    keyed by every recipe file's content. Reading each recipe's whole cache took envrun 2-4 ms with 9 recipes."""
    directory = str(directory or _recipes_dir_path())
    names = available_recipes(directory)
    keys = []
    for name in names:
        try:
            with open(os.path.join(directory, f"{name}.yaml"), "rb") as handle:
                keys.append(os.path.basename(_cache_file(name, handle.read())))
        except OSError:
            keys.append(name)
    joined = "|".join(keys).encode()
    cache = os.path.join(_recipes_cache_dir(), f"detect-{zlib.crc32(joined):08x}-{len(joined):x}.marshal")
    try:
        with open(cache, "rb") as handle:
            table = marshal.load(handle)  # noqa: S302 - our own cache file in the user's cache dir
        if isinstance(table, list) and [row[0] for row in table] == names:
            return table
    except (OSError, ValueError, EOFError, TypeError, IndexError):
        pass
    table = [(name, load_recipe_data(name, directory).get("detect") or {}) for name in names]
    _write_cache(cache, table)
    return table


def load_recipe(name: str, directory: Path | str | None = None) -> RecipeView:
    """The validated recipe `name`: from the JSON cache when the file is unchanged, else validated now."""
    return from_cached(load_recipe_data(name, directory))


def load_recipe_data(name: str, directory: Path | str | None = None) -> dict[str, Any]:
    """The validated recipe `name` as its cached data (plain dicts and lists, no views): what detection reads
    of every recipe. Building the views of all recipes took envrun 2-3 ms of its start-up."""
    directory = str(directory or _recipes_dir_path())
    path = os.path.join(directory, f"{name}.yaml")
    try:
        with open(path, "rb") as handle:
            content = handle.read()
    except OSError:
        known = ", ".join(available_recipes(directory)) or "none"
        raise UsageError(
            f"no system recipe named {name!r} in {directory}",
            f"use one of: {known} (or add recipes/{name}.yaml)",
        ) from None
    cache = _cache_file(name, content)
    try:
        with open(cache, "rb") as handle:
            data = marshal.load(handle)  # noqa: S302 - our own cache file in the user's cache dir
        if isinstance(data, dict):
            return data
    except (OSError, ValueError, EOFError, TypeError):
        pass
    from pathlib import Path

    data = _cacheable(Path(path), name)
    _write_cache(cache, data)
    return data


def _cacheable(path: Path, name: str) -> dict[str, Any]:
    """The validated recipe as JSON data, with the line of every field for `envrun --explain`."""
    from envbuild.recipes.schema import dump_for_cache
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

    from envbuild.recipes.schema import Recipe
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


def _write_cache(cache: str, data: Any) -> None:
    """Best effort: an unwritable cache only costs speed."""
    from envbuild.atomicfile import atomic_write

    try:
        os.makedirs(os.path.dirname(cache), exist_ok=True)
        atomic_write(cache, marshal.dumps(data))
    except OSError:
        pass
