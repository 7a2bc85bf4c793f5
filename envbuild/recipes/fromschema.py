"""What follows from the recipe schema (envbuild.recipes.schema), written from it so that a recipe fact has one
home: the protocols its readers are typed with (envbuild.recipes.protocols) and the recipe cache's format
(envbuild.recipes.cacheformat).

    .venv/bin/python -m envbuild.recipes.fromschema           # rewrite both files
    .venv/bin/python -m envbuild.recipes.fromschema --check   # exit 1 when either is not what the schema gives

tests/recipes/test_fromschema.py runs the check, so a schema change without the files it implies fails a test.

The protocols: one per model, named `Recipe` + the model's name (`SystemRecipe` for the whole recipe), one
read-only property per field, typed as a reader sees it whichever model holds the recipe (a Literal reads as
str, a dict as a Mapping, a nested model as its protocol), plus the properties and methods the models share
from envbuild.recipes.ops (`usable`, `cite`, ...).

The cache format: a digest of everything that decides the data a recipe is cached as (each field's name,
type, default and constraints, each validator's code, the code that dumps a model for the cache), so that
envrun never reads a cache written by another schema. Descriptions and comments are left out: editing them
changes no cached value. pydantic's JSON Schema is not the input either: its layout changes with pydantic's
version, and the digest must change with the schema only. The digest is a constant in a module of its own
because envrun reads it on every launch without importing pydantic (the schema) or typing (the protocols).
"""

from __future__ import annotations

import argparse
import hashlib
import inspect
import json
import sys
import textwrap
import types
import typing
from collections.abc import Callable, Iterator
from pathlib import Path

from pydantic import BaseModel

from envbuild.recipes import ops, schema
from envbuild.shared.safefiles import atomic_write

PACKAGE_DIR = Path(__file__).resolve().parent
PROTOCOLS_FILE = PACKAGE_DIR / "protocols.py"
CACHE_FORMAT_FILE = PACKAGE_DIR / "cacheformat.py"
REGENERATE = ".venv/bin/python -m envbuild.recipes.fromschema"

# Code besides the models' own validators that decides what a recipe is cached as: a change in it must change
# the cache format too.
CACHED_DATA_CODE: tuple[Callable[..., object], ...] = (schema.dump_for_cache, ops.parse_core_list)
CACHE_KEYS = (ops.MODEL_KEY, ops.SOURCE_KEY)

_PROTOCOLS_HEADER = '''\
"""What a system recipe's readers may read, whichever of the two models holds it: the validated pydantic
Recipe (envbuild.recipes.schema, when a recipe file is checked or a build validates it) or the light
RecipeView that envrun reads from the cache (envbuild.recipes.ops). Planners, checks and launches are
annotated with these protocols, so the type checker holds both models to one shape.

Generated from envbuild.recipes.schema by envbuild.recipes.fromschema; do not edit: change the schema and run
`{regenerate}`.

Every member is read-only, as both models are (the schema's are frozen): a property, so that a narrower type
fits too (a Literal, a dict for a Mapping, a nested model for its protocol). Type-checking only: modules on
envrun's launch path import this under TYPE_CHECKING (typing stays out of its start-up).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol
'''

_CACHE_FORMAT_TEXT = '''\
"""The format of envrun's cached recipes: a digest of what decides a recipe's cached data (the fields, types,
defaults, constraints and validators of envbuild.recipes.schema), part of every recipe cache file's name, so
that a cache written under another schema is never read.

Generated from envbuild.recipes.schema by envbuild.recipes.fromschema; do not edit: run `{regenerate}`.
A constant, not computed: envrun reads it on every launch, without pydantic.
"""

CACHE_FORMAT = "{digest}"
'''


def protocol_name(model: type[BaseModel]) -> str:
    """The protocol that stands for `model`: SystemRecipe for the whole recipe, Recipe<Model> for its parts."""
    return "SystemRecipe" if model is schema.Recipe else f"Recipe{model.__name__}"


def models(root: type[BaseModel] = schema.Recipe) -> list[type[BaseModel]]:
    """Every model reachable from `root`'s fields, each after the models it holds, `root` last."""
    ordered: list[type[BaseModel]] = []

    def visit(model: type[BaseModel]) -> None:
        if model in ordered:
            return
        for name in field_names(model):
            for nested in _nested_models(model.model_fields[name].annotation):
                visit(nested)
        ordered.append(model)

    visit(root)
    return ordered


def field_names(model: type[BaseModel]) -> list[str]:
    """The model's fields in the order its class states them (fields from a base class first)."""
    own = [name for name in inspect.get_annotations(model) if name in model.model_fields]
    return [*(name for name in model.model_fields if name not in own), *own]


def _nested_models(annotation: object) -> Iterator[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation
    for argument in typing.get_args(annotation):
        yield from _nested_models(argument)


def reader_type(annotation: object, *, exact: bool = False) -> str:
    """A field's type as its readers see it (exact=False: a Literal of str reads as str, a dict as a Mapping),
    or with every value it may take (exact=True, for the digest)."""
    origin = typing.get_origin(annotation)
    arguments = typing.get_args(annotation)
    if annotation is type(None) or annotation is None:
        return "None"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return protocol_name(annotation)
    if annotation in (str, int, float, bool):
        return annotation.__name__
    if origin is typing.Union or origin is types.UnionType:
        return " | ".join(reader_type(argument, exact=exact) for argument in arguments)
    if origin is typing.Literal:
        if exact:
            return f"Literal[{', '.join(repr(value) for value in arguments)}]"
        if all(type(value) is str for value in arguments):
            return "str"
    if origin is dict and len(arguments) == 2:
        return f"Mapping[{reader_type(arguments[0], exact=exact)}, {reader_type(arguments[1], exact=exact)}]"
    if origin is tuple:
        parts = ["..." if argument is Ellipsis else reader_type(argument, exact=exact) for argument in arguments]
        return f"tuple[{', '.join(parts)}]"
    raise TypeError(f"recipe schema: no reader type for {annotation!r}; fix: use str, int, float, bool, None, "
                    "Literal of str, dict, tuple or a model in the schema, or teach envbuild.recipes.fromschema.reader_type it")


def shared_members(model: type[BaseModel]) -> list[str]:
    """Protocol lines for what the model shares with the cached view through its mixins in envbuild.recipes.ops:
    their public properties and methods."""
    lines: list[str] = []
    for base in model.__mro__:
        if base.__module__ != ops.__name__:
            continue
        for name, value in vars(base).items():
            if name.startswith("_"):
                continue
            if isinstance(value, property) and value.fget is not None:
                lines += ["    @property", f"    def {name}(self) -> {value.fget.__annotations__['return']}: ..."]
            elif inspect.isfunction(value):
                signature = inspect.signature(value)  # annotations are text (the mixins' `from __future__ import annotations`)
                parameters = ["self", *(_parameter_text(parameter) for parameter in list(signature.parameters.values())[1:])]
                lines.append(f"    def {name}({', '.join(parameters)}) -> {signature.return_annotation}: ...")
    return lines


def _parameter_text(parameter: inspect.Parameter) -> str:
    text = parameter.name if parameter.annotation is inspect.Parameter.empty else f"{parameter.name}: {parameter.annotation}"
    return text if parameter.default is inspect.Parameter.empty else f"{text} = {parameter.default!r}"


def protocols_text(root: type[BaseModel] = schema.Recipe) -> str:
    """envbuild/recipes/protocols.py as the schema gives it."""
    blocks = [_PROTOCOLS_HEADER.format(regenerate=REGENERATE)]
    for model in models(root):
        lines = [f"class {protocol_name(model)}(Protocol):"]
        doc = model.__dict__.get("__doc__")
        if doc:
            lines += [textwrap.indent(f'"""{inspect.cleandoc(doc)}"""', "    "), ""]
        for name in field_names(model):
            lines += ["    @property", f"    def {name}(self) -> {reader_type(model.model_fields[name].annotation)}: ..."]
        lines += shared_members(model)
        blocks.append("\n".join(lines) + "\n")
    return "\n\n".join(blocks)


def schema_outline(root: type[BaseModel] = schema.Recipe) -> str:
    """Everything that decides a recipe's cached data, as text: what the cache format digests."""
    lines = [f"cache keys: {CACHE_KEYS!r}"]
    for model in models(root):
        lines.append(f"model {model.__name__}:")
        for name in field_names(model):
            field = model.model_fields[name]
            default = "required" if field.is_required() else \
                json.dumps(schema.dump_for_cache(field.get_default(call_default_factory=True)), sort_keys=True)
            lines.append(f"  {name}: {reader_type(field.annotation, exact=True)} = {default} {field.metadata!r}")
        decorators = model.__pydantic_decorators__
        validators = [*(("field", name, validator.func) for name, validator in decorators.field_validators.items()),
                      *(("model", name, validator.func) for name, validator in decorators.model_validators.items())]
        for kind, validator_name, function in sorted(validators, key=lambda item: item[:2]):
            lines.append(f"  {kind} validator {validator_name}:")  # its source names its fields and mode
            lines.append(textwrap.dedent(inspect.getsource(function)))
    lines += [textwrap.dedent(inspect.getsource(code)) for code in CACHED_DATA_CODE]
    return "\n".join(lines)


def cache_format(root: type[BaseModel] = schema.Recipe) -> str:
    return hashlib.sha256(schema_outline(root).encode()).hexdigest()[:16]


def cache_format_text(root: type[BaseModel] = schema.Recipe) -> str:
    """envbuild/recipes/cacheformat.py as the schema gives it."""
    return _CACHE_FORMAT_TEXT.format(regenerate=REGENERATE, digest=cache_format(root))


def expected_files() -> dict[Path, str]:
    return {PROTOCOLS_FILE: protocols_text(), CACHE_FORMAT_FILE: cache_format_text()}


def stale_files() -> list[Path]:
    """The generated files whose committed text is not what the schema gives."""
    return [path for path, text in expected_files().items() if not path.exists() or path.read_text(encoding="utf-8") != text]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m envbuild.recipes.fromschema", description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 when a file is not what the schema gives")
    arguments = parser.parse_args(argv)
    if arguments.check:
        stale = stale_files()
        for path in stale:
            print(f"{path}: not what envbuild/recipes/schema.py gives; fix: run `{REGENERATE}`", file=sys.stderr)
        return 1 if stale else 0
    for path, text in expected_files().items():
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            atomic_write(path, text)
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
