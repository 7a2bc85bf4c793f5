"""System recipes: per-site knowledge (GPUs, cores, binds, env, wheel indexes, launch rules) kept as
data in recipes/*.yaml, each fact citing its public source in a comment there.

Loading validates a recipe once (pydantic, envbuild.recipes.schema) and caches the result keyed by the
file's content and the schema's digest (envbuild.recipes.cacheformat, written from the schema); later loads
read the cache into a light view, so envrun starts without pydantic/YAML.
The cache is the user's own (envbuild.host.usercache: private, plain data checked when read back, never
in a shared store); the key includes the Python version, the only one whose marshal format it must read.

A recipe is named (`lumi-g`: recipes/lumi-g.yaml) or given as a file (`--system ./mysite.yaml`, what
`envrun recipe draft -o` writes; a spec's `system: ./mysite.yaml`, read from the spec file's directory): a value
with a `/` or ending in .yaml/.yml is a path. Either way the file's
`name:` must be its file name without .yaml, so that the same file can later move into recipes/ as it is.
"""

from __future__ import annotations

import os
import zlib

from envbuild.host.usercache import MISS, content_cache_name, is_text_list, read_cached, write_cached
from envbuild.recipes.cacheformat import CACHE_FORMAT
from envbuild.recipes.ops import MODEL_KEY, SOURCE_KEY, from_cached
from envbuild.shared.envnames import ENV_NAME_FIX, env_name_problem, is_env_name
from envbuild.shared.errors import UsageError

TYPE_CHECKING = False  # pathlib, typing and hashlib stay out of envrun's start-up
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

    from envbuild.recipes.protocols import SystemRecipe
    from envbuild.recipes.schema import Recipe


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


def _cache_name(name: str, content: bytes) -> str:
    """The cache file of recipe `name` with this content (envbuild.host.usercache keeps it)."""
    return content_cache_name(f"recipe-{name}", content, CACHE_FORMAT)


def detection_table(directory: Path | str | None = None) -> list[tuple[str, dict[str, Any]]]:
    """(name, `detect` data) of every recipe, for envrun's detection of the site: one cache file for all of them,
    keyed by every recipe file's path, size, modification time and inode: a stat per recipe file and one small read
    on every launch, not a read of every recipe file. The recipe a launch uses is still read, and its data cached by
    its content (load_recipe_data)."""
    directory = str(directory or _recipes_dir_path())
    names = available_recipes(directory)
    keys = [content_cache_name("detect", b"", CACHE_FORMAT)]  # envbuild's version, the recipes' cache format, Python's
    for name in names:
        path = os.path.join(directory, f"{name}.yaml")
        try:
            status = os.stat(path)
        except OSError:
            keys.append(name)
            continue
        keys.append(f"{path}:{status.st_size}:{status.st_mtime_ns}:{status.st_ino}")
    joined = "|".join(keys).encode()
    cache = f"detect-{zlib.crc32(joined):08x}-{len(joined):x}.marshal"
    cached = read_cached(cache, "|".join(keys), lambda table: _is_detection_table(table, names))
    if cached is not MISS:
        checked: list[tuple[str, dict[str, Any]]] = cached  # _is_detection_table checked its shape
        return checked
    table = [(name, load_recipe_data(name, directory).get("detect") or {}) for name in names]
    write_cached(cache, "|".join(keys), table)
    return table


def _is_detection_table(table: Any, names: list[str]) -> bool:
    return (type(table) is list and [row[0] for row in table] == names
            and all(type(row) is tuple and len(row) == 2 and type(row[1]) is dict for row in table))


RECIPE_SUFFIXES = (".yaml", ".yml")


def is_recipe_path(system: str) -> bool:
    """Whether a --system value names a recipe file (`./mysite.yaml`, `/proj/site.yaml`) rather than a recipe."""
    return "/" in system or system.endswith(RECIPE_SUFFIXES)


def recipe_reference(system: str, base_directory: str) -> str:
    """What load_recipe takes for a spec's `system:`: a recipe's name as it is, a recipe file's path (`~` expanded)
    made absolute against `base_directory` (the spec file's), so that the spec names the same file from any
    working directory."""
    if not is_recipe_path(system):
        return system
    return os.path.normpath(os.path.join(base_directory, os.path.expanduser(system)))


def load_recipe(name: str, directory: Path | str | None = None) -> SystemRecipe:
    """The validated recipe `name` (or the recipe file `name` is the path of): from the JSON cache when the file
    is unchanged, else validated now."""
    # A RecipeView of a validated Recipe's data (schema.dump_for_cache): it has the shape of one.
    recipe: SystemRecipe = from_cached(load_recipe_data(name, directory))
    return recipe


def load_recipe_data(name: str, directory: Path | str | None = None) -> dict[str, Any]:
    """The validated recipe `name` as its cached data (plain dicts and lists, no views): what detection reads
    of every recipe, without building a view of each on envrun's start-up path."""
    if is_recipe_path(name):
        return _load_recipe_file(name)
    directory = str(directory or _recipes_dir_path())
    path = os.path.join(directory, f"{name}.yaml")
    try:
        with open(path, "rb") as handle:
            content = handle.read()
    except OSError:
        known = ", ".join(available_recipes(directory)) or "none"
        raise UsageError(
            f"no system recipe named {name!r} in {directory}",
            f"use one of: {known}, or a recipe file's path (--system ./{name}.yaml; `envrun recipe draft` "
            f"writes one for this cluster), or add recipes/{name}.yaml",
        ) from None
    return _cached_recipe(path, name, content, _cache_name(name, content))


def _load_recipe_file(given: str) -> dict[str, Any]:
    """The recipe in the file `given` (--system ./mysite.yaml), cached under its path and content."""
    path = os.path.abspath(given)
    base = os.path.basename(path)
    name = next((base[: -len(suffix)] for suffix in RECIPE_SUFFIXES if base.endswith(suffix)), base)
    try:
        with open(path, "rb") as handle:
            content = handle.read()
    except OSError as exc:
        raise UsageError(f"cannot read the recipe file {given}: {exc.strerror}",
                         "give the path of a recipe file (`envrun recipe draft -o FILE` writes one for this "
                         "cluster) or the name of a recipe: " + (", ".join(available_recipes()) or "none")) from None
    cache = content_cache_name(f"recipe-file-{name}", path.encode() + b"\0" + content, CACHE_FORMAT)
    return _cached_recipe(path, name, content, cache, given_as_path=True)


def _cached_recipe(path: str, name: str, content: bytes, cache: str, *, given_as_path: bool = False) -> dict[str, Any]:
    cached = read_cached(cache, cache, lambda data: is_recipe_data(data, name))
    if cached is not MISS:
        checked: dict[str, Any] = cached  # is_recipe_data checked its shape
        return checked
    from pathlib import Path

    data = _cacheable(Path(path), name)
    if given_as_path:
        data[SOURCE_KEY]["given_as_path"] = True
    write_cached(cache, cache, data)
    return data


def is_recipe_data(data: Any, name: str) -> bool:
    """Whether cached data has the shape of recipe `name` as _cacheable made it, in what reaches a launch's
    command line and environment (binds, env) and what the views need; anything else is a cache miss."""
    source = data.get(SOURCE_KEY) if type(data) is dict else None
    env = data.get("env") if type(data) is dict else None
    return (type(source) is dict and data.get(MODEL_KEY) == "Recipe" and data.get("name") == name
            and type(source.get("file")) is str and type(source.get("lines")) is dict
            and is_text_list(data.get("binds")) and is_text_list(data.get("multinode_binds"))
            and type(env) is dict and all(is_env_name(key) and type(value) is str for key, value in env.items()))


def _cacheable(path: Path, name: str) -> dict[str, Any]:
    """The validated recipe as JSON data, with the line of every field for `envrun --explain`."""
    from envbuild.recipes.schema import dump_for_cache
    from envbuild.shared.yamlsource import load_yaml_file

    document = load_yaml_file(path)
    data: dict[str, Any] = dump_for_cache(validate_recipe_file(path, name, document))
    data[SOURCE_KEY] = {
        "file": str(path),
        "lines": {".".join(map(str, loc)): pos.line for loc, pos in document.positions.items() if loc},
    }
    return data


def validate_recipe_file(path: Path, name: str, document: Any = None) -> Recipe:
    from pydantic import ValidationError

    from envbuild.recipes.schema import Recipe
    from envbuild.shared.yamlsource import load_yaml_file

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
        raise UsageError(f"{path}: name is {recipe.name!r} but the file is named {name}.yaml",
                         f"make them agree: set `name: {name}` in it, or name the file {recipe.name}.yaml")
    for key in recipe.env:
        problem = env_name_problem(key)
        if problem:
            pos = document.position_of(("env", key))
            raise UsageError(f"{path}:{pos.line}:{pos.column}: env: {problem}", ENV_NAME_FIX)
    return recipe
