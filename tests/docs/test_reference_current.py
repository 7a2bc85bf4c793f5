"""docs/reference/cli.md and spec.md are what docs/gen_reference.py writes from the code now."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def load_generator():
    spec = importlib.util.spec_from_file_location("gen_reference", ROOT / "docs" / "gen_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generated_reference_is_current(monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    generator = load_generator()
    stale = [str(path.relative_to(ROOT)) for path in generator.stale_files()]
    assert not stale, f"{', '.join(stale)} differ from the CLI and spec definitions: run {generator.REGENERATE} and commit the result"
