"""The inventory cache is the user's own (issue 28, shared stores): never in $ENVBUILD_CACHE_DIR, which a
group may share, and an entry someone else could have written is a miss, never what `packages` shows."""

from __future__ import annotations

import marshal
import os
import shutil
from pathlib import Path

import pytest

from tests.conftest import REPO, run_cli
from tests.support.inventory_layout import cache_env, fixture_image, inventory_cache_entries

ENVBUILD = str(REPO / "bin" / "envbuild")
STRANGER = 65534  # nobody


def _poison(entry: Path) -> None:
    key, data = marshal.loads(entry.read_bytes())
    data["packages"].append({"environment": "/usr", "name": "planted", "version": "6.6.6", "source": "pip"})
    entry.write_bytes(marshal.dumps((key, data)))


def test_the_store_holds_no_inventory_and_a_shared_or_foreign_entry_is_a_miss(tmp_path: Path) -> None:
    env = cache_env(tmp_path)
    image = tmp_path / "img.sif"
    shutil.copy(fixture_image("gzip"), image)
    assert run_cli([ENVBUILD, "packages", str(image)], env_extra=env).returncode == 0
    assert not (Path(env["ENVBUILD_CACHE_DIR"]) / "inventory").exists()
    [entry] = inventory_cache_entries(env)
    assert entry.stat().st_mode & 0o777 == 0o600 and entry.parent.stat().st_mode & 0o777 == 0o700
    _poison(entry)
    assert "planted" in run_cli([ENVBUILD, "packages", str(image)], env_extra=env).stdout  # the user's own: used

    entry.chmod(0o666)  # anyone could have written it
    listed = run_cli([ENVBUILD, "packages", str(image)], env_extra=env)
    assert listed.returncode == 0 and "planted" not in listed.stdout and "six" in listed.stdout
    [entry] = inventory_cache_entries(env)  # read again and written back, private
    assert entry.stat().st_mode & 0o777 == 0o600

    if os.geteuid() == 0:  # a file another user owns (root can make one)
        _poison(entry)
        os.chown(entry, STRANGER, STRANGER)
        listed = run_cli([ENVBUILD, "packages", str(image)], env_extra=env)
        assert "planted" not in listed.stdout and "six" in listed.stdout


@pytest.mark.skipif(os.geteuid() != 0, reason="makes the cache directory another user's (root only)")
def test_a_cache_directory_of_another_user_is_neither_read_nor_written(tmp_path: Path) -> None:
    env = cache_env(tmp_path)
    image = tmp_path / "img.sif"
    shutil.copy(fixture_image("gzip"), image)
    assert run_cli([ENVBUILD, "packages", str(image)], env_extra=env).returncode == 0
    [entry] = inventory_cache_entries(env)
    _poison(entry)
    os.chown(entry.parent, STRANGER, STRANGER)
    listed = run_cli([ENVBUILD, "packages", str(image)], env_extra=env)
    assert listed.returncode == 0 and "planted" not in listed.stdout and "six" in listed.stdout
