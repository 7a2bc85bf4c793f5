"""envrun's overlay check (envbuild.launch.overlays) on real files: a squashfs overlay made with mksquashfs
holding an envbuild record, and a real SIF as the base. Made for this base (same SIF id, or same sha256)
runs; another base is refused naming both, or runs with a warning under --force-overlay; a sandbox base
cannot be identified; a file that is no envbuild overlay is refused with the reader's reason."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from envbuild.launch import overlays as overlays_module
from envbuild.launch.overlays import check_overlays, file_digest, read_overlays
from envbuild.shared.errors import UsageError
from envbuild.shared.overlayformat import DEFAULT_MOUNT, RECORD_FILE
from envbuild.sif.reader import read_sif_layout
from tests.support.envrun_overlays import FIXTURE_SIF, base_record, make_overlay, sha256_of


@pytest.fixture
def base(tmp_path: Path) -> Path:
    image = tmp_path / "base.sif"
    shutil.copyfile(FIXTURE_SIF, image)
    return image


@pytest.fixture
def other_base(tmp_path: Path) -> Path:
    """Another SIF: the fixture with a different header id (bytes 48..64), so a different sha256 too."""
    data = bytearray(FIXTURE_SIF.read_bytes())
    data[48:64] = bytes(range(16))
    image = tmp_path / "other.sif"
    image.write_bytes(bytes(data))
    return image


@pytest.fixture(autouse=True)
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # envrun's own cache: cache/envrun
    return tmp_path / "cache"


def test_an_overlay_built_for_this_base_is_recognised_by_its_sif_id(tmp_path: Path, base: Path) -> None:
    overlays = read_overlays([str(make_overlay(tmp_path, "env", base_record(base)))])
    assert overlays[0].mount == DEFAULT_MOUNT and overlays[0].record["python"]["version"] == "3.11.2"
    warnings, notes = check_overlays(overlays, str(base), force=False)
    sif_id = read_sif_layout(base).header.image_id
    assert warnings == [] and notes == [f"overlay {tmp_path}/env.sqsh: built for this image (same SIF id {sif_id})"]


def test_without_the_same_sif_id_the_sha256_decides(tmp_path: Path, base: Path) -> None:
    record = {**base_record(base), "sif_id": ""}  # e.g. a base that was no SIF when the overlay was built
    _, notes = check_overlays(read_overlays([str(make_overlay(tmp_path, "env", record))]), str(base), force=False)
    assert notes == [f"overlay {tmp_path}/env.sqsh: built for this image (same {sha256_of(base)})"]


def test_an_overlay_for_another_base_is_refused_naming_both(tmp_path: Path, base: Path, other_base: Path) -> None:
    overlays = read_overlays([str(make_overlay(tmp_path, "env", base_record(base)))])
    with pytest.raises(UsageError) as caught:
        check_overlays(overlays, str(other_base), force=False)
    other_id = read_sif_layout(other_base).header.image_id
    assert caught.value.message == (
        f"overlay {tmp_path}/env.sqsh was built for {base} ({sha256_of(base)}, SIF id {read_sif_layout(base).header.image_id}), "
        f"Python 3.11.2 cpython-311-x86_64-linux-gnu; this image is {other_base} ({sha256_of(other_base)}, SIF id {other_id})")
    assert caught.value.hint == (
        f"rebuild the overlay for this base: `envbuild build SPEC` with `base: localimage:{other_base}` in env's spec; "
        f"or run it on the base it was built for (--image {base}); or pass --force-overlay to run it anyway")


def test_force_overlay_runs_with_a_warning(tmp_path: Path, base: Path, other_base: Path) -> None:
    overlays = read_overlays([str(make_overlay(tmp_path, "env", base_record(base)))])
    warnings, notes = check_overlays(overlays, str(other_base), force=True)
    assert len(warnings) == 1 and notes == []
    assert warnings[0].startswith(f"overlay {tmp_path}/env.sqsh was built for {base} (")
    assert warnings[0].endswith("running it anyway (--force-overlay): its packages may not work with this base's Python")


def test_a_sandbox_base_cannot_be_identified(tmp_path: Path, base: Path) -> None:
    overlays = read_overlays([str(make_overlay(tmp_path, "env", base_record(base)))])
    sandbox = tmp_path / "sandbox"
    sandbox.mkdir()
    with pytest.raises(UsageError, match="is a sandbox directory, so envrun cannot tell whether overlay"):
        check_overlays(overlays, str(sandbox), force=False)
    warnings, _ = check_overlays(overlays, str(sandbox), force=True)
    assert "sandbox directory" in warnings[0] and "--force-overlay" in warnings[0]


def test_files_that_are_no_envbuild_overlay_are_refused(tmp_path: Path, base: Path) -> None:
    with pytest.raises(UsageError) as caught:
        read_overlays([str(base)])
    assert caught.value.message == f"overlay {base}: not a squashfs file (an overlay starts with 'hsqs')"
    assert caught.value.hint and "the .sqsh file that `envbuild build` wrote" in caught.value.hint
    plain = tmp_path / "plain-tree"
    (plain / "bin").mkdir(parents=True)
    subprocess.run(["mksquashfs", str(plain), str(tmp_path / "plain.sqsh"), "-noappend", "-quiet"], check=True,
                   capture_output=True)
    with pytest.raises(UsageError, match=re.escape(f"overlay {tmp_path}/plain.sqsh: a squashfs without {RECORD_FILE}")):
        read_overlays([str(tmp_path / "plain.sqsh")])
    with pytest.raises(UsageError, match=r"overlay /no/such\.sqsh does not exist"):
        read_overlays(["/no/such.sqsh"])


def test_the_digest_and_the_record_are_read_once_per_path_size_and_mtime(
        tmp_path: Path, base: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    overlay = make_overlay(tmp_path, "env", base_record(base))
    assert file_digest(str(base)) == sha256_of(base)
    record = read_overlays([str(overlay)])[0].record
    assert len(list((cache_dir / "envrun").glob("digests-*.marshal"))) == 1

    def not_again(path: str) -> None:
        raise AssertionError(f"{path} was read again although it did not change")

    monkeypatch.setattr(overlays_module, "_sha256", not_again)
    monkeypatch.setattr(overlays_module, "_read_record", not_again)
    assert file_digest(str(base)) == sha256_of(base)
    assert read_overlays([str(overlay)])[0].record == record
    base.write_bytes(base.read_bytes() + b"x")  # a changed file (size, mtime) is read again
    with pytest.raises(AssertionError, match="was read again"):
        file_digest(str(base))


def test_the_sif_id_is_the_one_the_inventory_reads(base: Path) -> None:
    assert overlays_module._sif_id(str(base)) == read_sif_layout(base).header.image_id
    assert overlays_module._sif_id(str(FIXTURE_SIF.parent)) is None
    assert overlays_module._sif_id("/etc/hostname") is None
