"""The recipe schema is the one home of a recipe fact: the readers' protocols and the cache format are written
from it (envbuild.recipes.fromschema), and a schema change without them fails here."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import Field, field_validator

from envbuild.recipes import fromschema
from envbuild.shared.strictmodel import StrictModel


def test_protocols_and_cache_format_are_what_the_schema_gives() -> None:
    stale = [f"envbuild/recipes/{path.name}" for path in fromschema.stale_files()]
    assert stale == [], f"{', '.join(stale)}: not what envbuild/recipes/schema.py gives; fix: run `{fromschema.REGENERATE}`"


def _as_given(cls: type, value: int) -> int:
    return value


def _doubled(cls: type, value: int) -> int:
    return value * 2


def _models(*, extra_field: bool = False, default: int = 1, description: str = "how big",
            doubling: bool = False) -> type[StrictModel]:
    """A small recipe-like schema, with one thing changed at a time."""

    class Part(StrictModel):
        """A nested part."""

        size: int = Field(default=default, ge=1, description=description)
        labels: dict[str, tuple[str, ...]] = Field(default_factory=dict)

        _scaled = field_validator("size")(_doubled if doubling else _as_given)

    if extra_field:
        class Site(StrictModel):
            name: str
            part: Part = Part()
            kind: str | None = None
    else:
        class Site(StrictModel):
            name: str
            part: Part = Part()
    return Site


def test_the_protocols_follow_the_fields() -> None:
    text = fromschema.protocols_text(_models())
    assert "class RecipePart(Protocol):\n    \"\"\"A nested part.\"\"\"\n" in text
    assert "    def labels(self) -> Mapping[str, tuple[str, ...]]: ..." in text
    assert "    def part(self) -> RecipePart: ..." in text
    added = fromschema.protocols_text(_models(extra_field=True))
    assert "    def kind(self) -> str | None: ..." in added and "def kind" not in text


def test_the_cache_format_follows_what_decides_the_cached_data() -> None:
    base = fromschema.cache_format(_models())
    assert fromschema.cache_format(_models()) == base
    assert fromschema.cache_format(_models(extra_field=True)) != base
    assert fromschema.cache_format(_models(default=2)) != base
    assert fromschema.cache_format(_models(doubling=True)) != base
    # a description is documentation: the cached values are the same
    assert fromschema.cache_format(_models(description="its size")) == base


def test_a_type_no_reader_type_fits_names_the_fix() -> None:
    class Odd(StrictModel):
        tags: frozenset[str] = frozenset()

    with pytest.raises(TypeError, match="fix: use str, int"):
        fromschema.protocols_text(Odd)


def test_a_cache_written_under_another_format_is_not_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from envbuild.recipes import loadrecipe

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    loadrecipe.load_recipe_data("local")
    monkeypatch.setattr(loadrecipe, "CACHE_FORMAT", "another-schema")
    loadrecipe.load_recipe_data("local")
    assert len(list((tmp_path / "envrun").glob("recipe-local-*.marshal"))) == 2
