"""Venv overlays (issue 11) read like images: the overlay's root shown at its mount point, its record
and venv facts, the cache, and the combination with a base (what the overlay's Python sees). The
overlays are made here with mksquashfs (tests/support/overlay_fixtures.py); the base is the committed fixture SIF."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from envbuild.inventory.combine import base_mismatch, combined_label, overlaid_inventory
from envbuild.inventory.image import read_inventory, sif_image_id
from envbuild.inventory.inventorycache import InventoryCache
from envbuild.inventory.overlayfile import read_overlay_record
from envbuild.inventory.pyenvs import Inventory
from envbuild.inventory.squashfs import Squashfs
from envbuild.inventory.trees import DirectoryTree, MountedTree
from envbuild.shared.errors import ImageFormatError
from tests.support.inventory_layout import fixture_image, lay_out
from tests.support.overlay_fixtures import fixture_base_identity, lay_out_overlay, make_overlay, overlay_record, squash

BASE = str(fixture_image("gzip"))
# What the overlay's Python sees on the fixture base: its own packages, /opt/venv's (named in
# _envbuild_base.pth) and the system site of /usr/bin's Python (/usr, and /usr/local as Debian adds it).
SEEN_ON_BASE = {
    ("requests", "2.32.4", "pip (hides /opt/venv 2.32.3)"), ("rich", "13.7.1", "pip"),
    ("big-meta", "1.0", "pip (base /opt/venv)"), ("long-header", "2.0", "pip (base /opt/venv)"),
    ("six", "1.16.0", "pip (base /usr)"), ("wheel", "0.43.0", "pip (base /usr/local)"),
}


def in_env(inventory: Inventory, prefix: str) -> set[tuple[str, str, str]]:
    return {(p.name, p.version, p.source) for p in inventory.packages if p.environment == prefix}


@pytest.fixture(scope="module")
def overlays(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """env.sqsh made for the fixture base; stranger.sqsh made for another base; tools.sqsh at /opt/tools."""
    work = tmp_path_factory.mktemp("overlays")
    matching = overlay_record(base=fixture_base_identity(Path(BASE)))
    tools = overlay_record(name="tools", mount="/opt/tools", base=fixture_base_identity(Path(BASE)),
                           added={"black": "24.4.2"}, kept={})
    return {
        "env": make_overlay(work, "env", record=matching),
        "stranger": make_overlay(work, "stranger", record=overlay_record(), compression="zstd"),
        "tools": make_overlay(work, "tools", record=tools,
                              base_site_dirs=("/user-software/lib/python3.11/site-packages",), system_site=False),
    }


# -- the tree at its mount point -------------------------------------------------------------------


def test_mounted_tree_shows_the_root_at_the_mount_point(tmp_path: Path) -> None:
    (tmp_path / "lib").mkdir()
    (tmp_path / "pyvenv.cfg").write_text("home = /usr/bin\n")
    tree = MountedTree(DirectoryTree(tmp_path), "/opt/envs/mine/")
    assert tree.children("/") == {"opt": "dir"}
    assert tree.children("/opt") == {"envs": "dir"}
    assert tree.children("/opt/envs") == {"mine": "dir"}
    assert tree.children("/opt/envs/mine") == {"lib": "dir", "pyvenv.cfg": "file"}
    assert tree.read("/opt/envs/mine/pyvenv.cfg", 100) == b"home = /usr/bin\n"
    assert tree.children("/usr") is None and tree.children("/opt/envs/other") is None
    assert tree.read("/pyvenv.cfg", 100) is None
    assert MountedTree(DirectoryTree(tmp_path), "/").children("/") == {"lib": "dir", "pyvenv.cfg": "file"}


# -- one overlay, read like an image ---------------------------------------------------------------


def test_an_overlay_lists_its_venv_at_the_mount_point(overlays: dict[str, Path]) -> None:
    inventory = read_inventory(str(overlays["env"]))
    assert [(e.prefix, e.kind, e.python) for e in inventory.environments] == [("/user-software", "venv", "3.11")]
    assert in_env(inventory, "/user-software") == {("requests", "2.32.4", "pip"), ("rich", "13.7.1", "pip")}
    assert inventory.problems == []
    venv = inventory.overlay
    assert venv is not None
    assert (venv.mount, venv.python, venv.home, venv.system_site) == ("/user-software", "3.11", "/usr/bin", True)
    assert venv.base_site_dirs == ("/opt/venv/lib/python3.11/site-packages",)
    assert venv.base_sif_id == sif_image_id(BASE)
    assert read_overlay_record(str(overlays["env"]))["mount"] == "/user-software"


def test_an_overlay_with_another_mount_point_is_listed_there(overlays: dict[str, Path]) -> None:
    inventory = read_inventory(str(overlays["tools"]))
    assert [e.prefix for e in inventory.environments] == ["/opt/tools"]
    assert in_env(inventory, "/opt/tools") == {("black", "24.4.2", "pip")}


def test_a_squashfs_without_a_record_is_listed_at_its_own_root_with_a_warning(tmp_path: Path) -> None:
    lay_out_overlay(tmp_path / "root")
    (tmp_path / "root/.envbuild/overlay.json").unlink()
    plain = squash(tmp_path / "root", tmp_path / "plain.sqsh")
    inventory = read_inventory(str(plain))
    assert [e.prefix for e in inventory.environments] == ["/"]
    assert inventory.overlay is None
    assert "not an envbuild overlay" in inventory.problems[0].message
    with pytest.raises(ImageFormatError, match="not made by envbuild"):
        read_overlay_record(str(plain))


def test_a_damaged_overlay_gives_a_clear_error_never_a_traceback(tmp_path: Path, overlays: dict[str, Path]) -> None:
    original = overlays["env"].read_bytes()
    used = Squashfs(str(overlays["env"])).superblock.bytes_used  # the rest is padding to 4 KiB
    cut = tmp_path / "cut.sqsh"
    cut.write_bytes(original[:used // 2])
    with pytest.raises(ImageFormatError) as caught:
        read_inventory(str(cut))
    assert str(cut) in caught.value.message and caught.value.hint
    rng = random.Random(11)
    damaged = tmp_path / "damaged.sqsh"
    for _ in range(40):
        data = bytearray(original)
        for _ in range(rng.choice([1, 8])):
            data[rng.randrange(4, used)] ^= 1 << rng.randrange(8)  # keep the magic: it stays an overlay
        damaged.write_bytes(bytes(data))
        try:
            read_inventory(str(damaged))
        except ImageFormatError as exc:
            assert str(damaged) in exc.message and exc.hint


def test_the_cache_keeps_an_overlays_venv_facts(tmp_path: Path, overlays: dict[str, Path],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    cache = InventoryCache()
    inventory = read_inventory(str(overlays["env"]))
    cache.store(str(overlays["env"]), inventory)
    loaded = cache.load(str(overlays["env"]))
    assert loaded == inventory and loaded.overlay == inventory.overlay
    assert sif_image_id(str(overlays["env"])) is None and sif_image_id(str(tmp_path)) is None


# -- a base with overlays --------------------------------------------------------------------------


def test_the_combination_lists_what_the_overlays_python_sees(overlays: dict[str, Path]) -> None:
    base = read_inventory(BASE)
    combined = overlaid_inventory(BASE, base, sif_image_id(BASE), [(str(overlays["env"]), read_inventory(str(overlays["env"])))])
    assert in_env(combined, "/user-software") == SEEN_ON_BASE
    # the base's environments are still there, unchanged
    assert {e.prefix for e in combined.environments} == {e.prefix for e in base.environments} | {"/user-software"}
    assert in_env(combined, "/opt/venv") == in_env(base, "/opt/venv")
    assert [p.message for p in combined.problems] == [p.message for p in base.problems]  # no mismatch warning
    assert combined_label("b.sif", ["x.sqsh", "y.sqsh"]) == "b.sif + x.sqsh + y.sqsh"


def test_without_system_site_packages_only_the_pth_directories_are_inherited(tmp_path: Path) -> None:
    overlay = make_overlay(tmp_path, record=overlay_record(base=fixture_base_identity(Path(BASE))), system_site=False,
                           base_site_dirs=("/opt/venv/lib64/python3.11/site-packages", "/opt/nothing/site-packages"))
    combined = overlaid_inventory(BASE, read_inventory(BASE), sif_image_id(BASE), [(str(overlay), read_inventory(str(overlay)))])
    assert {source for _, _, source in in_env(combined, "/user-software")} == {
        "pip", "pip (base /opt/venv)", "pip (hides /opt/venv 2.32.3)"}  # lib64 is the venv's lib
    missing = [p for p in combined.problems if "/opt/nothing" in p.message]
    assert len(missing) == 1 and missing[0].path.endswith("/user-software/lib/python3.11/site-packages/_envbuild_base.pth")


def test_an_overlay_made_for_another_base_is_listed_with_a_warning(overlays: dict[str, Path]) -> None:
    stranger = read_inventory(str(overlays["stranger"]))
    combined = overlaid_inventory(BASE, read_inventory(BASE), sif_image_id(BASE), [(str(overlays["stranger"]), stranger)])
    assert in_env(combined, "/user-software") == SEEN_ON_BASE
    warning = [p for p in combined.problems if p.path == str(overlays["stranger"])]
    assert len(warning) == 1
    assert "made for localimage:/images/base.sif (SIF id 00000000-0000-0000-0000-000000000000)" in warning[0].message
    assert f"not for {BASE} (SIF id {sif_image_id(BASE)})" in warning[0].message
    assert "cannot be checked" in base_mismatch("dir/", None, "x.sqsh", stranger.overlay).message


def test_overlays_stack_in_order_and_a_mount_hides_what_is_below_it(tmp_path: Path, overlays: dict[str, Path]) -> None:
    root = tmp_path / "sandbox"
    lay_out(root, "a")
    (root / "user-software/lib/python3.11/site-packages").mkdir(parents=True)
    (root / "user-software/pyvenv.cfg").write_text("home = /usr/bin\n")
    base = read_inventory(str(root))
    mounted = [(str(overlays[name]), read_inventory(str(overlays[name]))) for name in ("stranger", "env", "tools")]
    combined = overlaid_inventory(str(root), base, None, mounted)
    # the tools overlay's .pth names the /user-software venv: the last overlay mounted there (env.sqsh)
    assert in_env(combined, "/opt/tools") == {("black", "24.4.2", "pip"), ("requests", "2.32.4", "pip (base /user-software)"),
                                              ("rich", "13.7.1", "pip (base /user-software)")}
    hides = [p.message for p in combined.problems if "hides the environment /user-software" in p.message]
    assert hides == [f"mounted at /user-software, it hides the environment /user-software of {root}",
                     f"mounted at /user-software, it hides the environment /user-software of "
                     f"{root} + {overlays['stranger']}"]
    assert sum("is not a SIF file" in p.message for p in combined.problems) == 3


def test_only_an_overlay_can_be_mounted(overlays: dict[str, Path]) -> None:
    with pytest.raises(ImageFormatError, match="is not a venv overlay made by envbuild"):
        overlaid_inventory(str(overlays["env"]), read_inventory(str(overlays["env"])), None, [(BASE, read_inventory(BASE))])
