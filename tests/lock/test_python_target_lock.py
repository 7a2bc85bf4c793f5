"""Locks of specs whose packages go into the base's Python (python.target): the target is an input, the base's
distributions the lock keeps are written and read back, and locks written before either field read as before."""

from __future__ import annotations

from dataclasses import replace

from envbuild.lock.fileformat import read_lock, render_lock
from envbuild.lock.staleness import stale_reasons
from tests.lock.test_lock import INPUTS, make_lock


def test_kept_from_base_and_the_target_round_trip() -> None:
    lock = replace(make_lock(inputs=replace(INPUTS, python_target="base")), kept=("torch==2.5.0", "numpy==1.26.4"))
    text = render_lock(lock, spec_path_for_comment="ngc.yaml")
    assert "python-target: base" in text and "kept-from-base:\n  numpy: 1.26.4\n  torch: 2.5.0\n" in text
    assert read_lock(text, "ngc.lock") == lock


def test_a_lock_of_envbuilds_own_venv_is_written_as_before() -> None:
    text = render_lock(make_lock(), spec_path_for_comment="x.yaml")
    assert "python-target" not in text and "kept-from-base" not in text
    back = read_lock(text, "x.lock")
    assert back.inputs.python_target == "envbuild-venv" and back.kept == ()


def test_a_changed_target_makes_the_lock_stale() -> None:
    assert stale_reasons(make_lock(), replace(INPUTS, python_target="base")) == [
        "python.target changed: envbuild-venv -> base"]
