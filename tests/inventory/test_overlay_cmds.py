"""`envbuild packages | inspect | diff` on venv overlays, through the command line as a user runs them."""

from __future__ import annotations

import json
import marshal
from pathlib import Path

import pytest

from envbuild.inventory.image import sif_image_id
from tests.conftest import REPO, run_cli
from tests.support.inventory_layout import cache_env, fixture_image, inventory_cache_entries
from tests.support.overlay_fixtures import fixture_base_identity, make_overlay, overlay_record

ENVBUILD = str(REPO / "bin" / "envbuild")
BASE = str(fixture_image("gzip"))


@pytest.fixture(scope="module")
def overlays(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    work = tmp_path_factory.mktemp("overlay-cmds")
    newer = overlay_record(base=fixture_base_identity(Path(BASE)), python_version="3.11.9",
                           added={"requests": "2.32.5", "typer": "0.12.3"})
    return {
        "env": str(make_overlay(work, "env", record=overlay_record(base=fixture_base_identity(Path(BASE))))),
        "newer": str(make_overlay(work, "newer", record=newer)),
        "stranger": str(make_overlay(work, "stranger", record=overlay_record())),
    }


@pytest.fixture
def cli_env(tmp_path: Path) -> dict[str, str]:
    return cache_env(tmp_path)


def test_packages_of_an_overlay_alone_and_through_the_cache(overlays: dict[str, str], cli_env: dict[str, str]) -> None:
    shown = run_cli([ENVBUILD, "packages", overlays["env"]], env_extra=cli_env)
    assert shown.returncode == 0, shown.stderr
    # ARCH "-": a squashfs records no architecture (an overlay runs on its base's)
    assert [line.split()[1:] for line in shown.stdout.splitlines()[1:]] == [
        ["-", "/user-software", "requests", "2.32.4", "pip"], ["-", "/user-software", "rich", "13.7.1", "pip"]]
    entries = inventory_cache_entries(cli_env)
    assert len(entries) == 1 and marshal.loads(entries[0].read_bytes())[1]["overlay"]["mount"] == "/user-software"
    # the combination below reads the overlay's venv facts from that cache entry
    again = run_cli([ENVBUILD, "packages", BASE, "--overlay", overlays["env"], "--grep", "^six$"], env_extra=cli_env)
    assert "pip (base /usr)" in again.stdout


def test_packages_of_a_base_with_an_overlay(overlays: dict[str, str], cli_env: dict[str, str]) -> None:
    label = f"{BASE} + {overlays['env']}"
    shown = run_cli([ENVBUILD, "packages", BASE, "--overlay", overlays["env"], "--grep", "^(requests|six|rich)$"],
                    env_extra=cli_env)
    assert shown.returncode == 0, shown.stderr
    assert all(line.startswith(label) for line in shown.stdout.splitlines()[1:])
    assert {line[len(label):].split()[0] for line in shown.stdout.splitlines()[1:]} == {"x86_64"}  # the base's
    assert {tuple(line[len(label):].split(None, 4)[1:]) for line in shown.stdout.splitlines()[1:]} == {
        ("/opt/venv", "requests", "2.32.3", "pip"), ("/usr", "six", "1.16.0", "pip"),
        ("/user-software", "requests", "2.32.4", "pip (hides /opt/venv 2.32.3)"),
        ("/user-software", "rich", "13.7.1", "pip"), ("/user-software", "six", "1.16.0", "pip (base /usr)")}
    assert "made for" not in shown.stderr  # the overlay was made for this base

    document = json.loads(run_cli([ENVBUILD, "packages", BASE, "--overlay", overlays["env"], "--json"], env_extra=cli_env).stdout)
    assert [image["path"] for image in document["images"]] == [label]
    assert {"environment": "/user-software", "name": "six", "version": "1.16.0", "source": "pip (base /usr)",
            "image": label} in document["packages"]


def test_a_stranger_overlay_is_listed_with_a_warning_and_the_matrix_names_the_combinations(
        overlays: dict[str, str], cli_env: dict[str, str]) -> None:
    zstd = str(fixture_image("zstd"))
    shown = run_cli([ENVBUILD, "packages", BASE, zstd, "--overlay", overlays["stranger"], "--matrix", "--grep", "^rich$"],
                    env_extra=cli_env)
    assert shown.returncode == 0, shown.stderr
    assert [line.split() for line in shown.stdout.splitlines()] == [
        ["PACKAGE", "layout-a.gzip.sif", "+", "stranger.sqsh", "layout-a.zstd.sif", "+", "stranger.sqsh"],
        ["rich", "13.7.1", "13.7.1"]]
    for base in (BASE, zstd):
        assert f"not for {base} (SIF id {sif_image_id(base)})" in shown.stderr
    as_json = json.loads(run_cli([ENVBUILD, "packages", BASE, "--overlay", overlays["stranger"], "--matrix", "--json",
                                  "--grep", "^rich$"], env_extra=cli_env).stdout)
    label = f"{BASE} + {overlays['stranger']}"
    assert as_json["matrix"] == {"rich": {label: "13.7.1"}}
    assert any("made for localimage:/images/base.sif" in p["message"] for p in as_json["images"][0]["problems"])


def test_overlay_misuse_is_refused_with_a_fix(overlays: dict[str, str], cli_env: dict[str, str]) -> None:
    not_overlay = run_cli([ENVBUILD, "packages", overlays["env"], "--overlay", BASE], env_extra=cli_env)
    assert not_overlay.returncode == 1 and "is not a venv overlay made by envbuild" in not_overlay.stderr
    assert "fix:" in not_overlay.stderr and "Traceback" not in not_overlay.stderr
    runtime = run_cli([ENVBUILD, "packages", BASE, "--overlay", overlays["env"], "--via-runtime"], env_extra=cli_env)
    assert runtime.returncode == 2 and "--via-runtime" in runtime.stderr and "Traceback" not in runtime.stderr


def test_inspect_an_overlay(overlays: dict[str, str], cli_env: dict[str, str]) -> None:
    shown = run_cli([ENVBUILD, "inspect", overlays["env"]], env_extra=cli_env)
    assert shown.returncode == 0, shown.stderr
    identity = fixture_base_identity(Path(BASE))
    for expected in (f"overlay: {overlays['env']}", "squashfs 4.0, gzip, block 128.0 KiB", "inodes (files, directories, links)",
                     "mount: /user-software", f"SIF id: {identity['sif_id']}", f"digest: {identity['digest']}",
                     "version:     3.11.2 (ABI cpython-311-x86_64-linux-gnu)", "chosen:      the venv /opt/venv",
                     "    /opt/venv/lib/python3.11/site-packages (_envbuild_base.pth)",
                     "packages: 2 added in the overlay, 2 kept from the base", "  added: requests==2.32.4",
                     "  kept:  big-meta==1.0", "lock: (none: built without a lock)", "/user-software  (venv, python 3.11, 2 pip)",
                     "envbuild spec (/user-software/.envbuild/spec.yaml):", "    name: tiny-overlay"):
        assert expected in shown.stdout, expected
    data = json.loads(run_cli([ENVBUILD, "inspect", overlays["env"], "--json"], env_extra=cli_env).stdout)
    assert data["overlay"]["base"]["sif_id"] == identity["sif_id"]
    assert data["squashfs"]["compression"] == "gzip" and data["squashfs"]["inodes"] > 10
    assert data["file_size"] == Path(overlays["env"]).stat().st_size
    assert data["inventory"]["overlay"]["base_site_dirs"] == ["/opt/venv/lib/python3.11/site-packages"]


def test_diff_two_overlays_and_an_image_with_an_overlay(overlays: dict[str, str], cli_env: dict[str, str]) -> None:
    changed = run_cli([ENVBUILD, "diff", overlays["env"], overlays["newer"]], env_extra=cli_env)
    assert changed.returncode == 0, changed.stderr
    lines = changed.stdout.splitlines()
    for expected in ("environment /user-software: 1 added, 1 removed, 1 changed", "  ~ requests (pip) 2.32.4 -> 2.32.5",
                     "  + typer (pip) 0.12.3", "  - rich (pip) 13.7.1", "overlay record (.envbuild/overlay.json):",
                     "  ~ python.version 3.11.2 -> 3.11.9"):
        assert expected in lines, expected
    data = json.loads(run_cli([ENVBUILD, "diff", overlays["env"], overlays["stranger"], "--json"], env_extra=cli_env).stdout)
    assert {c["key"] for c in data["overlay_record"]} == {"base.ref", "base.digest", "base.sif_id"}
    assert json.loads(run_cli([ENVBUILD, "diff", overlays["env"], overlays["env"], "--json"], env_extra=cli_env).stdout)["identical"]
    mixed = json.loads(run_cli([ENVBUILD, "diff", BASE, overlays["env"], "--json"], env_extra=cli_env).stdout)
    assert {"key": "mount", "change": "added", "old": None, "new": "/user-software"} in mixed["overlay_record"]
    assert {e["prefix"]: e["status"] for e in mixed["environments"]}["/user-software"] == "added"
