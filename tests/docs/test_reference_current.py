"""docs/reference/cli.md, spec.md and modules.md are what docs/gen_reference.py writes from the code now."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GENERATOR = ROOT / "docs" / "gen_reference.py"


def load_generator():
    spec = importlib.util.spec_from_file_location("gen_reference", GENERATOR)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generated_reference_is_current():
    # In its own process: click caches a command's help option on first use, so help texts written inside
    # this test session would depend on which tests ran before.
    result = subprocess.run([sys.executable, str(GENERATOR), "--check"], capture_output=True, text=True, check=False,
                            cwd=ROOT, env={**os.environ, "COLUMNS": "100"}, timeout=120)
    assert result.returncode == 0, f"{result.stderr.strip()} (the committed reference differs from the CLI and spec definitions)"
