"""The guard that retires a store layer when a build wrote through a hard link into it."""

from __future__ import annotations

import io
from pathlib import Path

from envbuild.builder.execute.executor import BuildExecutor
from envbuild.builder.plan.actions import CopyTree, GuardTree, Step


def run(tmp_path: Path, *, write_through: bool) -> tuple[Path, str]:
    parent = tmp_path / "parent"
    (parent / "rootfs" / "pkg").mkdir(parents=True)
    (parent / "rootfs" / "pkg" / "__init__.py").write_text("shared = 1\n")
    (parent / "complete").write_text("x\n")
    child = tmp_path / "child"
    child.mkdir()
    snapshot = str(child / "parent.snapshot")
    out = io.StringIO()
    executor = BuildExecutor(tmp_path / "log", store_root=tmp_path / "store", out=out)
    executor.execute_steps((Step("env", "env", (CopyTree(str(parent / "rootfs"), str(child / "rootfs"), hardlink=True,
                                                         snapshot=snapshot),)),), None, "t")
    target = child / "rootfs" / "pkg" / "__init__.py"
    if write_through:
        with open(target, "a") as handle:  # what an installer overwriting a shared file in place does
            handle.write("more = 2\n")
    else:
        target.unlink()  # what installers do: replace, never write through
        target.write_text("new = 3\n")
    executor.execute_steps((Step("guard", "guard", (GuardTree(str(parent / "rootfs"), snapshot, str(parent / "complete")),)),),
                           None, "t")
    return parent, out.getvalue()


def test_a_replaced_file_leaves_the_parent_layer_valid(tmp_path: Path) -> None:
    parent, said = run(tmp_path, write_through=False)
    assert (parent / "complete").exists() and "warning" not in said
    assert (parent / "rootfs" / "pkg" / "__init__.py").read_text() == "shared = 1\n"


def test_a_write_through_retires_the_parent_layer(tmp_path: Path) -> None:
    parent, said = run(tmp_path, write_through=True)
    assert not (parent / "complete").exists()
    assert "wrote through hard links" in said and "pkg/__init__.py" in said
