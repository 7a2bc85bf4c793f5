"""The file checks of an overlay build (envbuild.builder.sessions.overlaysession) that need no container: is the base a SIF
file, and which key does an existing output overlay record (a no-op rebuild compares it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from envbuild.builder.sessions.overlaysession import _is_sif_file, _overlay_key_of
from tests.support.inventory_layout import fixture_image
from tests.support.overlay_fixtures import lay_out_overlay, make_overlay, overlay_record, squash


@pytest.mark.parametrize("compression", ["gzip", "zstd"])
def test_a_sif_file_is_recognised(compression: str) -> None:
    assert _is_sif_file(str(fixture_image(compression)))


def test_other_files_are_not_sif_files(tmp_path: Path) -> None:
    overlay = make_overlay(tmp_path)
    short = tmp_path / "short.sif"
    short.write_bytes(fixture_image("gzip").read_bytes()[:38])  # cut inside the magic
    moved = tmp_path / "moved.sif"  # the magic one byte off its place
    moved.write_bytes(b"\0" + fixture_image("gzip").read_bytes()[:100])
    for path in (overlay, short, moved, tmp_path / "missing.sif", tmp_path):
        assert not _is_sif_file(str(path)), path


def test_the_key_recorded_in_an_overlay(tmp_path: Path) -> None:
    record = {**overlay_record(), "key": "4" * 64}
    assert _overlay_key_of(make_overlay(tmp_path, record=record)) == "4" * 64


def test_no_key_from_what_is_not_an_envbuild_overlay(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    (plain / "bin").mkdir(parents=True)
    (plain / "bin/tool").write_text("#!/bin/sh\n")
    text = tmp_path / "notes.sqsh"
    text.write_text("not a squashfs\n")
    truncated = tmp_path / "truncated.sqsh"
    truncated.write_bytes(make_overlay(tmp_path).read_bytes()[:200])
    for path in (tmp_path / "missing.sqsh", tmp_path, text, fixture_image("gzip"), squash(plain, tmp_path / "plain.sqsh"),
                 truncated):
        assert _overlay_key_of(path) is None, path


def test_no_key_from_an_overlay_whose_record_is_damaged(tmp_path: Path) -> None:
    root = tmp_path / "env.root"
    lay_out_overlay(root)
    (root / ".envbuild/overlay.json").write_text('{"kind": "overlay"')
    assert _overlay_key_of(squash(root, tmp_path / "env.sqsh")) is None
