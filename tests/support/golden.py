"""Golden files (tests/golden/): the text a pure planner or renderer must produce, compared byte for byte.

After an intended change, rewrite them with ENVBUILD_UPDATE_GOLDEN=1 and the golden tests (docs/development.md
lists the command), review the diff, and commit it; a name that no case table lists is reported as stale by
tests/test_golden_files.py."""

from __future__ import annotations

import os
from pathlib import Path

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
UPDATE_FLAG = "ENVBUILD_UPDATE_GOLDEN"


def check_golden(name: str, text: str) -> None:
    """Compare `text` with tests/golden/NAME (rewritten first when ENVBUILD_UPDATE_GOLDEN=1)."""
    path = GOLDEN / name
    if os.environ.get(UPDATE_FLAG) == "1":
        path.write_text(text)
    assert path.exists(), f"missing golden file {path}; run with {UPDATE_FLAG}=1"
    assert text == path.read_text()
