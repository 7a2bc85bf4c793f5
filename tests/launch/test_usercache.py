"""envrun's own cache (issue 28, envbuild.host.usercache): the user's alone, under the user's cache dir even
when a shared store is set, 0600 files in a 0700 directory; a file that is not the user's own and private, or
does not hold the plain data its reader expects, is a miss, and the value comes from the real file again. Tried
with the two users: the owner (the test's uid) and a stranger who owns or may write the cache."""

from __future__ import annotations

import marshal
import os
from pathlib import Path

import pytest

from envbuild.host.usercache import MISS, is_plain, read_cached, user_cache_dir, write_cached
from envbuild.launch.config import read_settings
from envbuild.recipes import loadrecipe as load_module
from envbuild.recipes.loadrecipe import load_recipe_data, recipes_dir
from tests.support.trust_accounts import stranger

PROJECT = "image: env.sif\nbinds: [data]\nenv: {HF_HOME: /scratch/hf}\n"


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("ENVBUILD_CACHE_DIR", str(tmp_path / "shared-store"))  # a group's store: never used
    return tmp_path / "xdg" / "envrun"


def test_written_private_in_the_users_own_cache_dir_never_in_the_shared_store(cache: Path, tmp_path: Path) -> None:
    assert user_cache_dir() == str(cache)
    assert user_cache_dir({"XDG_CACHE_HOME": "relative", "HOME": "/h"}) == "/h/.cache/envrun", "XDG: absolute only"
    write_cached("thing", "key", {"a": [1, "b", None, 2.5, True]})
    assert read_cached("thing", "key") == {"a": [1, "b", None, 2.5, True]}
    assert cache.stat().st_mode & 0o777 == 0o700 and (cache / "thing").stat().st_mode & 0o777 == 0o600
    assert not (tmp_path / "shared-store").exists()
    assert read_cached("thing", "other key") is MISS, "a file read back under another key (renamed) is a miss"
    write_cached("none", "key", None)
    assert read_cached("none", "key") is None, "None is a value, not a miss"
    assert read_cached("absent", "key") is MISS


def test_a_file_a_stranger_owns_is_a_miss_and_is_replaced_by_the_users_own(cache: Path) -> None:
    write_cached("thing", "key", {"binds": ["/data"]})
    path = cache / "thing"
    path.write_bytes(marshal.dumps(("key", {"binds": ["/:/hostroot"]})))
    account = stranger()
    os.chown(path, account.pw_uid, account.pw_gid)
    assert read_cached("thing", "key") is MISS
    write_cached("thing", "key", {"binds": ["/data"]})  # the caller recomputed it
    assert path.stat().st_uid == os.geteuid() and read_cached("thing", "key") == {"binds": ["/data"]}


@pytest.mark.parametrize("mode", [0o666, 0o620, 0o602])
def test_a_file_others_may_write_is_a_miss(cache: Path, mode: int) -> None:
    write_cached("thing", "key", "value")
    (cache / "thing").chmod(mode)
    assert read_cached("thing", "key") is MISS
    write_cached("thing", "key", "value")
    assert (cache / "thing").stat().st_mode & 0o777 == 0o600 and read_cached("thing", "key") == "value"


def test_a_directory_others_may_write_is_a_miss_and_is_closed_when_it_is_the_users(cache: Path) -> None:
    write_cached("thing", "key", "value")
    cache.chmod(0o777)
    assert read_cached("thing", "key") is MISS
    write_cached("thing", "key", "value")
    assert cache.stat().st_mode & 0o777 == 0o700 and read_cached("thing", "key") == "value"


def test_a_directory_a_stranger_owns_is_never_read_nor_written(cache: Path) -> None:
    write_cached("thing", "key", "value")
    account = stranger()
    os.chown(cache, account.pw_uid, account.pw_gid)
    assert read_cached("thing", "key") is MISS
    write_cached("new", "key", "value")
    assert not (cache / "new").exists()


def test_a_link_in_the_cache_is_a_miss(cache: Path, tmp_path: Path) -> None:
    write_cached("thing", "key", "value")
    (cache / "thing").rename(tmp_path / "elsewhere")
    (cache / "thing").symlink_to(tmp_path / "elsewhere")
    assert read_cached("thing", "key") is MISS


@pytest.mark.parametrize("content", [
    b"", b"garbage\x00\xff", marshal.dumps(("key",)), marshal.dumps(["key", "value"]),
    marshal.dumps(("key", {"code": compile("print(1)", "x", "exec")})), marshal.dumps(("key", {b"bytes": 1})),
    marshal.dumps(("key", {"a": {1, 2}})), marshal.dumps(("key", [frozenset()])), marshal.dumps(("key", 1j)),
    marshal.dumps(("key", {1: "int key"})), marshal.dumps(("key", b"bytes")),
])
def test_garbage_and_what_is_not_plain_data_are_misses(cache: Path, content: bytes) -> None:
    write_cached("thing", "key", "value")
    (cache / "thing").write_bytes(content)
    assert read_cached("thing", "key") is MISS


def test_is_plain_looks_all_the_way_down() -> None:
    assert is_plain({"a": [{"b": ("c", 1, 2.0, None, False)}]})
    assert not is_plain({"a": [{"b": ("c", {1, 2})}]})


@pytest.mark.parametrize("hidden", [b"bytes", {1}, frozenset(), (lambda: 0).__code__, 1j, ...])
def test_is_plain_finds_what_marshal_makes_besides_plain_data(hidden: object) -> None:
    """Anything marshal can make that is not plain data, at any depth and in any place: a value, a key, an item."""
    assert not is_plain(hidden)
    assert not is_plain([hidden])
    assert not is_plain(("a", [1, {"b": [hidden]}]))
    assert not is_plain({"a": {"b": hidden}})
    assert not is_plain({"a": [["x", ("y", hidden)]], "c": "d"})
    if isinstance(hidden, (bytes, frozenset, complex)) or hidden is ...:
        assert not is_plain({hidden: 1})  # a key that is not text
    assert not is_plain({1: "a"})
    assert is_plain([]) and is_plain({}) and is_plain("text") and is_plain(None)
    assert is_plain({"lines": {"node.gpus": 1, "env.A": 2}, "binds": ["/a", "/b"], "env": {"A": "1"}, "nested": [[[()]]]})


def test_a_value_its_reader_refuses_is_a_miss(cache: Path) -> None:
    write_cached("thing", "key", {"binds": "not a list"})
    assert read_cached("thing", "key", lambda v: isinstance(v["binds"], list)) is MISS
    assert read_cached("thing", "key", lambda v: v["missing"]) is MISS, "a check that fails on the shape is a miss"


def _only_cache_file(cache: Path, prefix: str) -> Path:
    found = sorted(cache.glob(f"{prefix}-*"))
    assert len(found) == 1, found
    return found[0]


def test_a_tampered_project_cache_gives_the_files_own_settings(cache: Path, tmp_path: Path) -> None:
    """The cached form of a project's envrun.yaml, edited (as a group member could in a shared store): wrong
    types, an env key that is a command, extra keys. Each is a miss: the file itself is validated again."""
    path = tmp_path / "envrun.yaml"
    path.write_text(PROJECT)
    honest = read_settings(str(path), project=True)
    cached = _only_cache_file(cache, "project")
    key, value = marshal.loads(cached.read_bytes())
    tampered = [
        {**value, "binds": ["/:/hostroot"], "extra": 1},
        {**value, "env": {"LD_PRELOAD=/x.so;": "y"}},
        {**value, "env": {"FOO\n": "y"}},
        {**value, "binds": "/:/hostroot"},
        {**value, "systems": {"local": {"binds": ["/"], "env": {}}}},
        {**value, "batch": {**value["batch"], "requeue_max": "3"}},
        {**value, "image": 5},
        [value],
    ]
    for bad in tampered:
        cached.write_bytes(marshal.dumps((key, bad)))
        assert read_settings(str(path), project=True) == honest, bad
    cached.write_bytes(marshal.dumps((key, {**value, "env": {"HF_HOME": "/elsewhere"}})))
    assert read_settings(str(path), project=True)["env"] == {"HF_HOME": "/elsewhere"}, \
        "the test's tampering reaches the reader: a well-formed cache file of the user's own is used"


def test_the_config_cache_is_checked_for_trusted_dirs_too(cache: Path, tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("trusted_dirs: [/projappl/shared]\nenv: {TORCH_HOME: /t}\n")
    honest = read_settings(str(path))
    assert honest["trusted_dirs"] == ["/projappl/shared"]
    cached = _only_cache_file(cache, "config")
    key, value = marshal.loads(cached.read_bytes())
    cached.write_bytes(marshal.dumps((key, {**value, "trusted_dirs": "/"})))
    assert read_settings(str(path)) == honest


def test_a_tampered_recipe_cache_is_validated_again(cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    recipes = tmp_path / "recipes"
    recipes.mkdir()
    (recipes / "local.yaml").write_text((recipes_dir() / "local.yaml").read_text())
    honest = load_recipe_data("local", recipes)
    cached = _only_cache_file(cache, "recipe-local")
    key, value = marshal.loads(cached.read_bytes())
    for bad in ({**value, "env": {"A;B": "x"}}, {**value, "binds": "/"}, {**value, "name": "lumi-g"},
                {**value, "__model__": "Other"}, {k: v for k, v in value.items() if k != "__source__"}):
        cached.write_bytes(marshal.dumps((key, bad)))
        assert load_recipe_data("local", recipes) == honest
    account = stranger()
    os.chown(cached, account.pw_uid, account.pw_gid)
    validated: list[str] = []
    real = load_module._cacheable
    monkeypatch.setattr(load_module, "_cacheable", lambda path, name: validated.append(name) or real(path, name))
    assert load_recipe_data("local", recipes) == honest and validated == ["local"]



def test_the_runtimes_version_line_is_cached_per_user_and_checked(cache: Path, tmp_path: Path) -> None:
    """envrun's cached `apptainer --version` (the supported-version check and the runtime's name, which decides
    APPTAINERENV_ or SINGULARITYENV_): in the user's cache, and a tampered line means a new probe."""
    from envbuild.host.runtimeversion import cached_version_line

    calls = tmp_path / "calls"
    runtime = tmp_path / "apptainer"
    runtime.write_text(f'#!/bin/sh\necho probed >> "{calls}"\necho "apptainer version 1.4.5"\n')
    runtime.chmod(0o755)
    assert cached_version_line(str(runtime)) == "apptainer version 1.4.5"
    assert cached_version_line(str(runtime)) == "apptainer version 1.4.5"
    assert calls.read_text().count("probed") == 1
    cached = _only_cache_file(cache, "version")
    key, _ = marshal.loads(cached.read_bytes())
    for bad in ("singularity-ce version 9\nx", 4, ["apptainer version 1.4.5"]):
        cached.write_bytes(marshal.dumps((key, bad)))
        assert cached_version_line(str(runtime)) == "apptainer version 1.4.5"
    assert calls.read_text().count("probed") == 4
    assert not (tmp_path / "shared-store").exists()

