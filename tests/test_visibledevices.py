"""The visible-device variables have one home, envbuild/shared/visibledevices.py: no other module of envbuild
writes one of their names as a value of its own (a list, a tuple, a comparison), so a second list cannot appear
beside it and drift from it."""

from __future__ import annotations

import ast
from pathlib import Path

from envbuild.shared import visibledevices
from envbuild.shared.visibledevices import VISIBLE_DEVICE_STAGES, VISIBLE_DEVICE_VARIABLES

REPO = Path(__file__).resolve().parent.parent
HOME = Path(visibledevices.__file__).resolve()


def names_written(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, name) of every string constant in `tree` that is exactly a visible-device variable's name; text that
    only mentions one (a docstring, a message, shell text) is not a second home."""
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and node.value in VISIBLE_DEVICE_VARIABLES]


def test_no_module_but_the_home_writes_a_visible_device_variable() -> None:
    found = [f"{path.relative_to(REPO)}:{line}: {name!r}"
             for path in sorted((REPO / "envbuild").rglob("*.py")) if path.resolve() != HOME
             for line, name in names_written(ast.parse(path.read_text(encoding="utf-8")))]
    assert found == [], ("visible-device variables written outside envbuild/shared/visibledevices.py:\n" + "\n".join(found)
                         + "\nfix: import VISIBLE_DEVICE_VARIABLES, VISIBLE_DEVICE_STAGES or the name from there")


def test_the_detector_sees_a_second_list_and_passes_over_text() -> None:
    second = 'SEEN = ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES")\nif name == "GPU_DEVICE_ORDINAL": pass\n'
    assert [name for _, name in names_written(ast.parse(second))] == [
        "CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL"]
    text = '"""Reads CUDA_VISIBLE_DEVICES."""\nwhy = "no GPU in CUDA_VISIBLE_DEVICES"\nline = "export HIP_VISIBLE_DEVICES=0"\n'
    assert names_written(ast.parse(text)) == []


def test_each_vendor_narrows_by_variables_of_the_list_and_every_variable_counts_somewhere() -> None:
    staged = [name for stages in VISIBLE_DEVICE_STAGES.values() for stage in stages for name in stage]
    assert set(staged) == set(VISIBLE_DEVICE_VARIABLES)
    assert len(set(VISIBLE_DEVICE_VARIABLES)) == len(VISIBLE_DEVICE_VARIABLES)
    assert all(name.isidentifier() and name.isupper() for name in VISIBLE_DEVICE_VARIABLES)
