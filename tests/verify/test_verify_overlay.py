"""`envbuild verify X.sqsh [SPEC] [--base BASE.sif]` without a container runtime: overlays made with
mksquashfs (tests/support/overlay_fixtures.py) for the committed fixture base SIF. Each difference is planted
and must be reported with its message; unplanted, the overlay matches."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from envbuild.inventory.image import sif_image_id
from envbuild.shared.errors import EnvbuildError
from envbuild.verify.imagecheck import Verification, render_verification
from envbuild.verify.overlaycheck import verify_overlay
from tests.conftest import REPO, run_cli
from tests.support.inventory_layout import fixture_image
from tests.support.overlay_fixtures import OVERLAY_SPEC, fixture_base_identity, lay_out_overlay, make_overlay, overlay_record, squash
from tests.verify.test_verify import H, lock_text, make_lock

ENVBUILD = str(REPO / "bin" / "envbuild")
BASE = fixture_image("gzip")
# The default overlay adds requests and rich and keeps six (/usr) and big-meta (/opt/venv) from the base.
LOCKED = {"requests": ("2.32.4", H["a"]), "rich": ("13.7.1", H["b"]), "six": ("1.16.0", H["c"]), "big-meta": ("1.0", H["d"])}
REQUIREMENTS = ("requests>=2.32.4", "rich")


def overlay_lock(packages: dict[str, tuple[str, str]] | None = None) -> str:
    return lock_text(make_lock(LOCKED if packages is None else packages, requirements=REQUIREMENTS), "tiny-overlay.yaml")


def build(work: Path, name: str = "env", *, lock: str | None = None, record: dict[str, Any] | None = None,
          **layout: Any) -> Path:
    if record is None:
        record = overlay_record(base=fixture_base_identity(BASE), lock=lock)
    return make_overlay(work, name, record=record, lock=lock, **layout)


def spec_beside(directory: Path, text: str = OVERLAY_SPEC, lock: str | None = None) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "tiny-overlay.yaml").write_text(text)
    if lock is not None:
        (directory / "tiny-overlay.lock").write_text(lock)
    return directory / "tiny-overlay.yaml"


def diffs(result: Verification, area: str | None = None) -> list[str]:
    return [d.message for d in result.differences if area is None or d.area == area]


# -- the overlay against its record and embedded lock ---------------------------------------------


def test_an_overlay_as_recorded_matches_with_its_lock_spec_and_base(tmp_path: Path) -> None:
    lock = overlay_lock()
    overlay = build(tmp_path, lock=lock)
    result = verify_overlay(overlay, spec_beside(tmp_path / "envs", lock=lock), BASE)
    assert result.ok, render_verification(result)
    assert result.passed == [
        "record: all 2 added packages installed in the overlay as recorded",
        "embedded lock: all 4 packages at their locked versions (2 of them kept from the base)",
        f"spec: {tmp_path / 'envs/tiny-overlay.yaml'} is the spec the overlay was built from",
        "requirements: all 2 of the spec's requirements are met",
        f"lock: {tmp_path / 'envs/tiny-overlay.lock'} is the lock the overlay was built with",
        "lock: all 4 packages of tiny-overlay.lock installed at their versions (2 of them kept from the base)",
        f"base: {BASE} is the image the overlay was made for (SIF id {sif_image_id(str(BASE))})",
        f"base: all 2 packages kept from the base are in {BASE} at their recorded versions",
    ]
    assert render_verification(result).endswith("result: the overlay matches\n")


def test_installed_packages_against_the_record(tmp_path: Path) -> None:
    overlay = build(tmp_path, installed={"requests": "2.32.3", "typer": "0.12.3", "pip": "24.0"})
    assert diffs(verify_overlay(overlay), "record") == [
        "requests: the record has 2.32.4, the overlay has 2.32.3",
        "rich 13.7.1: in the record, not installed",
        "typer 0.12.3: installed, not in the record",
    ]  # pip came with the venv: not a difference unless the record lists it
    record = overlay_record(base=fixture_base_identity(BASE), added={"requests": "2.32.4", "rich": "13.7.1", "pip": "24.0"})
    listed = build(tmp_path, "listed", record=record, installed={"requests": "2.32.4", "rich": "13.7.1"})
    assert diffs(verify_overlay(listed)) == ["pip 24.0: in the record, not installed"]


def test_a_lock_pin_of_a_kept_package_is_compared_with_the_base_not_the_overlay(tmp_path: Path) -> None:
    lock = overlay_lock({**LOCKED, "six": ("1.17.0", H["c"]), "idna": ("3.10", H["e"])})
    result = verify_overlay(build(tmp_path, lock=lock))
    assert diffs(result, "lock") == [
        "idna 3.10: in the embedded lock, not installed",
        "six: the embedded lock has 1.17.0, the overlay uses the base's 1.16.0",
    ]


# -- against a spec and the lock next to it --------------------------------------------------------


def test_requirements_are_met_by_kept_packages_too(tmp_path: Path) -> None:
    overlay = build(tmp_path)
    wants_six = spec_beside(tmp_path / "a", OVERLAY_SPEC + "    - six>=1.16\n    - numpy\n")
    result = verify_overlay(overlay, wants_six)
    assert diffs(result, "package") == ["numpy: the spec wants numpy, not installed"]
    assert diffs(result, "spec")[0].startswith(f"{wants_six} changed since the build (sha256 ")


def test_a_spec_with_another_base_is_named(tmp_path: Path) -> None:
    spec = spec_beside(tmp_path / "b", OVERLAY_SPEC.replace("/images/base.sif", "/images/newer.sif"))
    assert diffs(verify_overlay(build(tmp_path), spec), "base") == [
        f"base: the overlay has localimage:{BASE}, the spec says localimage:/images/newer.sif"]


def test_a_different_lock_next_to_the_spec_is_a_difference(tmp_path: Path) -> None:
    overlay = build(tmp_path, lock=overlay_lock())
    other = overlay_lock({**LOCKED, "rich": ("13.8.0", H["b"])})
    messages = diffs(verify_overlay(overlay, spec_beside(tmp_path / "envs", lock=other)), "lock")
    assert messages[0].startswith(f"{tmp_path / 'envs/tiny-overlay.lock'} is not the lock the overlay was built with")
    assert "rich: tiny-overlay.lock has 13.8.0, the overlay has 13.7.1" in messages


# -- against a base -------------------------------------------------------------------------------


def test_the_base_identity_by_sif_id_or_else_by_digest(tmp_path: Path) -> None:
    copy = tmp_path / "copy.sif"
    shutil.copy(BASE, copy)
    assert verify_overlay(build(tmp_path), base=copy).ok  # a copy keeps the id
    stranger = build(tmp_path, "stranger", record=overlay_record())
    assert diffs(verify_overlay(stranger, base=BASE), "base") == [
        f"base: {BASE} has SIF id {sif_image_id(str(BASE))}, the overlay was made for localimage:/images/base.sif "
        "(SIF id 00000000-0000-0000-0000-000000000000)"]
    identity = {**fixture_base_identity(BASE), "sif_id": ""}
    by_digest = build(tmp_path, "digest", record=overlay_record(base=identity))
    assert f"base: {BASE} is the image the overlay was made for ({identity['digest']})" in verify_overlay(by_digest, base=BASE).passed
    wrong = build(tmp_path, "wrong", record=overlay_record(base={**identity, "digest": "sha256:" + "0" * 64}))
    assert diffs(verify_overlay(wrong, base=BASE), "base")[0].startswith(f"base: {BASE} is {identity['digest']}, the overlay")


def test_what_the_base_must_provide(tmp_path: Path) -> None:
    record = overlay_record(base=fixture_base_identity(BASE), kept={"six": "1.17.0", "torch": "2.5.1", "big-meta": "1.0"})
    record["python"]["path"] = "/opt/python3.11/bin/python3"
    overlay = build(tmp_path, record=record, base_site_dirs=("/opt/venv/lib/python3.11/site-packages", "/opt/gone/site-packages"))
    assert diffs(verify_overlay(overlay, base=BASE), "base") == [
        f"python: {BASE} has no /opt/python3.11/bin/python3, the interpreter the overlay's venv runs",
        f"six: the record kept 1.17.0 from the base, {BASE} has 1.16.0",
        f"torch 2.5.1: kept from the base by the record, {BASE} does not provide it",
        f"names /opt/gone/site-packages, which {BASE} does not have: the overlay's Python misses the packages it was built against",
    ]


def test_an_overlays_torchvision_is_checked_against_the_torch_it_kept_from_the_base(tmp_path: Path) -> None:
    """Without --base, the record's kept pins (labels only) stand for the base's torch."""
    kept = {"six": "1.16.0", "big-meta": "1.0", "torch": "2.6.0+rocm6.2.4"}
    added = {"requests": "2.32.4", "rich": "13.7.1", "torchvision": "0.21.0"}
    overlay = build(tmp_path, record=overlay_record(base=fixture_base_identity(BASE), kept=kept, added=added))
    assert diffs(verify_overlay(overlay), "torch") == [
        "torch family mismatch: torchvision 0.21.0 is PyPI's default build (no variant label; on Linux x86_64 a CUDA "
        "build), but torch 2.6.0+rocm6.2.4 is the ROCm 6.2.4 build (rocm6.2.4); fix: make torchvision 0.21.0+rocm6.2.4 "
        "reachable: PyTorch's index for the variant has it, https://download.pytorch.org/whl/rocm6.2.4 (set "
        "python.pytorch.index_url, or add it to the host's pip configuration as extra-index-url, or a find-links "
        "directory holding the wheel); or drop torchvision from the spec if the image does not need it"]
    added["torchvision"] = "0.21.0+rocm6.2.4"
    good = build(tmp_path, "good", record=overlay_record(base=fixture_base_identity(BASE), kept=kept, added=added))
    assert diffs(verify_overlay(good), "torch") == []


def test_what_is_not_an_overlay_is_refused(tmp_path: Path) -> None:
    with pytest.raises(EnvbuildError, match="no such overlay"):
        verify_overlay(tmp_path / "absent.sqsh")
    with pytest.raises(EnvbuildError, match="is not a venv overlay"):
        verify_overlay(BASE)
    lay_out_overlay(tmp_path / "root")
    (tmp_path / "root/.envbuild/overlay.json").unlink()
    with pytest.raises(EnvbuildError, match=r"is not an envbuild overlay \(it has no .envbuild/overlay.json\)"):
        verify_overlay(squash(tmp_path / "root", tmp_path / "plain.sqsh"))
    with pytest.raises(EnvbuildError, match="no such base image"):
        verify_overlay(build(tmp_path), base=tmp_path / "absent.sif")


# -- through the CLI -------------------------------------------------------------------------------


def test_cli_dispatches_overlays_and_reports_exit_status(tmp_path: Path) -> None:
    ok = run_cli([ENVBUILD, "verify", str(build(tmp_path)), "--base", str(BASE)])
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert ok.stdout.rstrip().endswith("result: the overlay matches")
    stranger = build(tmp_path, "stranger", record=overlay_record())
    bad = run_cli([ENVBUILD, "verify", str(stranger), "--base", str(BASE), "--json"])
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert [d["area"] for d in json.loads(bad.stdout)["differences"]] == ["base"]
    misuse = run_cli([ENVBUILD, "verify", str(BASE), "--base", str(BASE)])
    assert misuse.returncode == 2 and "--base is for venv overlays" in misuse.stderr and "Traceback" not in misuse.stderr
