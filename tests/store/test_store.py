"""The build store: listing, sizes, prune policies, atomic removal, cross-process locks, and `envbuild cache`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from envbuild.cli.cache_cmds import cache_group
from envbuild.shared.errors import EnvbuildError, UsageError
from envbuild.store import prune as store
from envbuild.store.entries import StoreEntry, list_entries, parse_size, touch_used
from envbuild.store.locks import entry_lock, try_entry_lock
from envbuild.store.prune import choose_prunable, remove_entry

HOUR = 3600.0
DAY = 86400.0
KIND_DIRS = {"base": "bases", "env": "envs", "image": "images"}


def make_entry(root: Path, kind: str, name: str, *, complete: bool = True, meta: dict | None = None,
               payload: int = 0, used_ago: float | None = None, age: float = 0.0) -> Path:
    """An entry as the build code leaves it; `age` backdates every file, `used_ago` writes last-used."""
    entry = root / KIND_DIRS[kind] / name
    (entry / "rootfs").mkdir(parents=True)
    if payload:
        (entry / "rootfs" / "blob").write_bytes(os.urandom(payload))
    if meta is not None:
        (entry / "meta.json").write_text(json.dumps(meta))
    if complete:
        (entry / "complete").write_text("ok\n")
    backdate(entry, time.time() - age)
    if used_ago is not None:
        touch_used(entry)
        os.utime(entry / "last-used", (time.time() - used_ago,) * 2)
    return entry


def backdate(top: Path, when: float) -> None:
    for directory, subdirs, files in os.walk(top, topdown=False):
        for name in subdirs + files:
            os.utime(os.path.join(directory, name), (when, when), follow_symlinks=False)
    os.utime(top, (when, when))


def fake(kind: str, name: str, *, size: int = 0, last_used: float = 0.0, complete: bool = True) -> StoreEntry:
    return StoreEntry(kind, name, Path("/store") / name, complete, last_used, last_used, size, "", {})


def names(entries: list[StoreEntry]) -> list[str]:
    return [e.name for e in entries]


# ---------------------------------------------------------------------------------------------- listing


def test_lists_complete_incomplete_and_metaless_entries(tmp_path: Path) -> None:
    make_entry(tmp_path, "env", "e1", meta={"kind": "env", "created": "2024-05-01T10:00:00Z",
                                            "description": "torch==2.13.0\non debootstrap:bookworm", "spec": "train"})
    make_entry(tmp_path, "base", "b1")
    (tmp_path / "bases" / "b1" / "digest").write_text("sha256:abc\n")
    make_entry(tmp_path, "image", "i1", complete=False)
    (tmp_path / "images" / "i1" / "image.sif.partial").write_bytes(b"x")
    make_entry(tmp_path, "env", "broken")
    (tmp_path / "envs" / "broken" / "meta.json").write_text("{not json")
    (tmp_path / "work" / "train-1234").mkdir(parents=True)
    (tmp_path / "uv").mkdir()
    (tmp_path / "envs" / "stray-file").write_text("not an entry")

    entries = {e.qualified_name: e for e in list_entries(tmp_path)}

    assert list(entries) == ["base/b1", "env/broken", "env/e1", "image/i1", "work/train-1234", "download/uv"]
    env = entries["env/e1"]
    assert env.complete and env.meta["spec"] == "train"
    assert env.description == "torch==2.13.0 on debootstrap:bookworm"  # one line
    assert env.created == pytest.approx(1714557600.0)
    assert entries["base/b1"].description == "sha256:abc"
    assert entries["env/broken"].meta == {} and entries["env/broken"].complete
    assert not entries["image/i1"].complete
    assert not entries["work/train-1234"].complete


def test_missing_store_lists_nothing(tmp_path: Path) -> None:
    assert list_entries(tmp_path / "nowhere") == []


def test_last_used_prefers_the_marker_then_complete(tmp_path: Path) -> None:
    make_entry(tmp_path, "env", "used", age=10 * DAY, used_ago=2 * HOUR)
    make_entry(tmp_path, "env", "unused", age=10 * DAY)
    entries = {e.name: e for e in list_entries(tmp_path)}
    now = time.time()
    assert now - entries["used"].last_used == pytest.approx(2 * HOUR, abs=60)
    assert now - entries["unused"].last_used == pytest.approx(10 * DAY, abs=60)


def test_sizes_count_allocated_blocks_and_hard_links_once(tmp_path: Path) -> None:
    entry = make_entry(tmp_path, "env", "e", payload=256 * 1024)
    blob = entry / "rootfs" / "blob"
    os.link(blob, entry / "rootfs" / "blob-link")
    os.symlink("/usr", entry / "rootfs" / "usr-link")  # not followed
    with open(entry / "rootfs" / "sparse", "wb") as sparse:
        sparse.truncate(1024**3)

    size = list_entries(tmp_path)[0].size_bytes

    assert 256 * 1024 <= size < 1024 * 1024
    assert list_entries(tmp_path, with_sizes=False)[0].size_bytes == 0


def test_touch_used_updates_the_marker(tmp_path: Path) -> None:
    entry = make_entry(tmp_path, "image", "i", age=DAY)
    touch_used(entry)
    assert time.time() - list_entries(tmp_path)[0].last_used < 60


# ---------------------------------------------------------------------------------------------- prune policy


def test_default_prune_removes_only_stale_leftovers() -> None:
    now = 1_000_000.0
    entries = [
        fake("env", "old-complete", last_used=now - 100 * DAY),
        fake("env", "killed", last_used=now - 2 * HOUR, complete=False),
        fake("env", "building", last_used=now - 60, complete=False),
        fake("work", "stale-scratch", last_used=now - 2 * HOUR, complete=False),
        fake("work", "running-scratch", last_used=now - 60, complete=False),
        fake("trash", "half-removed", last_used=now - 2 * HOUR, complete=False),
        fake("download", "uv", last_used=now - 100 * DAY),
    ]
    chosen = choose_prunable(entries, now=now, older_than=None, max_size=None)
    assert names(chosen) == ["killed", "stale-scratch", "half-removed"]


def test_older_than_removes_entries_unused_that_long() -> None:
    now = 1_000_000.0
    entries = [fake("env", "fresh", last_used=now - 1 * DAY), fake("image", "stale", last_used=now - 40 * DAY),
               fake("download", "pip", last_used=now - 40 * DAY)]
    assert names(choose_prunable(entries, now=now, older_than=30 * DAY, max_size=None)) == ["stale"]
    both = choose_prunable(entries, now=now, older_than=30 * DAY, max_size=None, include_downloads=True)
    assert sorted(names(both)) == ["pip", "stale"]


def test_max_size_evicts_least_recently_used_until_under() -> None:
    now = 1_000_000.0
    gib = 1024**3
    entries = [
        fake("env", "newest", size=10 * gib, last_used=now - 1 * HOUR),
        fake("env", "oldest", size=10 * gib, last_used=now - 9 * DAY),
        fake("base", "middle", size=10 * gib, last_used=now - 5 * DAY),
        fake("image", "recent", size=10 * gib, last_used=now - 2 * HOUR),
        fake("download", "uv", size=100 * gib, last_used=now - 99 * DAY),  # neither counted nor chosen
    ]
    chosen = choose_prunable(entries, now=now, older_than=None, max_size=25 * gib)
    assert names(chosen) == ["oldest", "middle"]
    assert choose_prunable(entries, now=now, older_than=None, max_size=40 * gib) == []


def test_max_size_counts_what_was_already_chosen_as_gone() -> None:
    now = 1_000_000.0
    entries = [fake("env", "a", size=10, last_used=now - 10 * DAY), fake("env", "b", size=10, last_used=now - 5 * DAY),
               fake("work", "w", size=100, last_used=now - 5 * HOUR, complete=False)]
    assert names(choose_prunable(entries, now=now, older_than=None, max_size=15)) == ["w", "a"]


def test_downloads_alone_are_emptied_when_asked() -> None:
    now = 1_000_000.0
    entries = [fake("download", "uv", last_used=now), fake("env", "e", last_used=now - 99 * DAY)]
    assert names(choose_prunable(entries, now=now, older_than=None, max_size=None, include_downloads=True)) == ["uv"]


# ---------------------------------------------------------------------------------------------- removal


def test_remove_entry_renames_into_trash_before_deleting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    entry_dir = make_entry(tmp_path, "env", "e", payload=1000)
    seen: list[str] = []
    real_remove = store._remove_tree

    def observe(parent: int, name: str, shown: Path) -> None:
        seen.append(name)
        assert not entry_dir.exists()  # gone from its place before the slow delete starts
        assert os.path.samestat(os.fstat(parent), os.stat(tmp_path / "trash"))  # deleted from trash, by descriptor
        real_remove(parent, name, shown)

    monkeypatch.setattr(store, "_remove_tree", observe)
    remove_entry(tmp_path, list_entries(tmp_path)[0])

    assert len(seen) == 1 and seen[0].startswith("e-")
    assert list(os.scandir(tmp_path / "trash")) == []
    assert list_entries(tmp_path) == []


REMOVE_AS_USER = textwrap.dedent("""
    import sys
    from pathlib import Path
    from envbuild.store.entries import list_entries
    from envbuild.store.prune import remove_entry
    remove_entry(Path(sys.argv[1]), list_entries(Path(sys.argv[1]))[0])
""")


def test_remove_entry_opens_read_only_directories(tmp_path: Path) -> None:
    """Read-only directories of ours (usr/share/doc from some packages) are made writable to be emptied. As
    root nothing is read-only, so where the tests run as root the removal runs as the unprivileged user."""
    if os.geteuid() == 0:  # pytest's temporary directories are root's alone (0700): the user needs one of theirs
        import tempfile

        tmp_path = Path(tempfile.mkdtemp(prefix="envbuild-store-test-", dir="/var/tmp"))
        tmp_path.chmod(0o711)
    store_root = tmp_path / "store"
    entry_dir = make_entry(store_root, "env", "e")
    locked = entry_dir / "rootfs" / "usr" / "share"
    locked.mkdir(parents=True)
    (locked / "doc").write_text("x")
    locked.chmod(0o555)
    entry_dir.chmod(0o555)  # renaming it into trash rewrites its "..": it must be opened up for that too
    if os.geteuid() == 0:
        from tests.support.trust_accounts import as_user, unprivileged

        account = unprivileged()
        for directory, subdirs, files in os.walk(store_root):
            for name in (directory, *(os.path.join(directory, n) for n in subdirs + files)):
                os.lchown(name, account.pw_uid, account.pw_gid)
        ran = as_user(account, [sys.executable, "-c", REMOVE_AS_USER, str(store_root)], cwd=tmp_path,
                      env_extra={"PYTHONPATH": str(Path(__file__).parents[2])})
        assert ran.returncode == 0, ran.stderr
    else:
        remove_entry(store_root, list_entries(store_root)[0])
    assert list_entries(store_root) == []
    assert list(os.scandir(store_root / "trash")) == []
    if os.geteuid() == 0:
        import shutil

        shutil.rmtree(tmp_path)


def test_remove_entry_refuses_a_busy_entry(tmp_path: Path) -> None:
    entry_dir = make_entry(tmp_path, "image", "busy")
    entry = list_entries(tmp_path)[0]
    with entry_lock(tmp_path, "image", "busy"):
        with pytest.raises(store.EntryBusyError) as caught:
            remove_entry(tmp_path, entry)
    assert "in use by a build" in caught.value.message and f"pid {os.getpid()}" in caught.value.message
    assert caught.value.hint and "retry" in caught.value.hint
    assert entry_dir.is_dir()
    remove_entry(tmp_path, entry)
    assert not entry_dir.exists()


def test_remove_entry_rejects_an_entry_of_another_store(tmp_path: Path) -> None:
    make_entry(tmp_path / "a", "env", "e")
    with pytest.raises(EnvbuildError, match="not an entry of the store"):
        remove_entry(tmp_path / "b", list_entries(tmp_path / "a")[0])


# ---------------------------------------------------------------------------------------------- locks

HOLDER = textwrap.dedent("""
    import sys
    from pathlib import Path
    from envbuild.store.locks import entry_lock
    with entry_lock(Path(sys.argv[1]), "env", "shared"):
        print("held", flush=True)
        sys.stdin.readline()
""")


def test_entry_lock_waits_for_another_process(tmp_path: Path) -> None:
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdin is not None
        assert holder.stdout.readline().strip() == "held"
        assert try_entry_lock(tmp_path, "env", "shared") is None

        messages: list[str] = []
        acquired = threading.Event()

        def wait_for_lock() -> None:
            with entry_lock(tmp_path, "env", "shared", on_wait=messages.append):
                acquired.set()

        waiter = threading.Thread(target=wait_for_lock, daemon=True)
        waiter.start()
        deadline = time.monotonic() + 10
        while not messages and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(messages) == 1
        assert "waiting for another build" in messages[0]
        assert str(tmp_path / "locks" / "env-shared.lock") in messages[0]
        assert f"pid {holder.pid}" in messages[0]
        time.sleep(0.2)
        assert not acquired.is_set()

        holder.stdin.write("release\n")
        holder.stdin.flush()
        waiter.join(timeout=10)
        assert acquired.is_set()
    finally:
        holder.kill()
        holder.wait()


def test_free_lock_is_taken_without_waiting(tmp_path: Path) -> None:
    messages: list[str] = []
    with entry_lock(tmp_path, "base", "b", on_wait=messages.append) as lock:
        assert lock.held
        assert f"pid {os.getpid()}" in (tmp_path / "locks" / "base-b.lock").read_text()
    assert messages == []
    assert not lock.held
    again = try_entry_lock(tmp_path, "base", "b")
    assert again is not None
    again.release()


@pytest.mark.parametrize(("kind", "name"), [("bogus", "x"), ("env", "a/b"), ("env", ""), ("env", "..")])
def test_lock_rejects_bad_kinds_and_names(tmp_path: Path, kind: str, name: str) -> None:
    with pytest.raises(EnvbuildError):
        entry_lock(tmp_path, kind, name)


# ---------------------------------------------------------------------------------------------- parsing


@pytest.mark.parametrize(("text", "expected"), [
    ("50G", 50 * 1024**3), ("50GiB", 50 * 1024**3), ("50gb", 50 * 1024**3), ("1.5T", int(1.5 * 1024**4)),
    ("512K", 512 * 1024), ("10M", 10 * 1024**2), ("1234", 1234), ("0", 0),
])
def test_parse_size(text: str, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "G", "50X", "-5G", "5 G B", "lots"])
def test_parse_size_errors_name_the_value_and_the_forms(text: str) -> None:
    with pytest.raises(UsageError) as caught:
        parse_size(text)
    assert repr(text) in caught.value.message and "50G" in (caught.value.hint or "")


# ---------------------------------------------------------------------------------------------- CLI


@pytest.fixture
def populated(tmp_path: Path) -> Path:
    make_entry(tmp_path, "env", "abc123", meta={"description": "torch==2.13.0 on debootstrap:bookworm"},
               payload=20_000, used_ago=3 * HOUR, age=5 * DAY)
    make_entry(tmp_path, "env", "abd456", age=40 * DAY)
    make_entry(tmp_path, "image", "img789", age=1 * DAY)
    make_entry(tmp_path, "base", "killed", complete=False, age=2 * HOUR)
    return tmp_path


def cache(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cache_group, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_cli_ls_table(populated: Path) -> None:
    code, out, _ = cache("ls", "--cache-dir", str(populated))
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["KIND", "NAME", "SIZE", "LAST-USED", "DESCRIPTION"]
    abc = next(line for line in lines if "abc123" in line)
    assert abc.split()[0] == "env" and "KiB" in abc and "3 h ago" in abc and "torch==2.13.0" in abc
    assert "[incomplete]" in next(line for line in lines if "killed" in line)
    assert lines[-1].startswith("total ") and "4 entries" in lines[-1] and "cache prune" in lines[-1]


def test_cli_ls_json(populated: Path) -> None:
    code, out, _ = cache("ls", "--json", "--cache-dir", str(populated))
    assert code == 0
    data = json.loads(out)
    assert [d["name"] for d in data] == ["killed", "abc123", "abd456", "img789"]
    abc = data[1]
    assert abc["kind"] == "env" and abc["complete"] and abc["size_bytes"] >= 20_000
    assert abc["last_used"].endswith("Z") and abc["meta"]["description"].startswith("torch")


def test_cli_ls_empty_store(tmp_path: Path) -> None:
    code, out, _ = cache("ls", "--cache-dir", str(tmp_path / "none"))
    assert code == 0 and "is empty" in out


def test_cli_prune_dry_run_removes_nothing(populated: Path) -> None:
    code, out, _ = cache("prune", "--older-than", "30d", "--dry-run", "--cache-dir", str(populated))
    assert code == 0
    assert "would remove base killed" in out and "would remove env abd456" in out
    assert "abc123" not in out and "would free" in out
    assert len(list_entries(populated)) == 4


def test_cli_prune_default_removes_only_leftovers(populated: Path) -> None:
    code, out, _ = cache("prune", "--cache-dir", str(populated))
    assert code == 0 and "removed base killed" in out and "freed" in out
    assert sorted(e.name for e in list_entries(populated)) == ["abc123", "abd456", "img789"]


def test_cli_prune_skips_busy_entries_with_a_note(populated: Path) -> None:
    with entry_lock(populated, "env", "abd456"):
        code, out, err = cache("prune", "--older-than", "30d", "--cache-dir", str(populated))
    assert code == 0 and "removed base killed" in out
    assert "note: skipped env abd456 is in use by a build" in err
    assert "abd456" in [e.name for e in list_entries(populated)]


def test_cli_prune_bad_option_values(populated: Path) -> None:
    code, _, err = cache("prune", "--max-size", "50X", "--cache-dir", str(populated))
    assert code == 2 and "invalid size '50X'" in err
    for bad in ("30y", "d", "-1d", ""):
        code, _, err = cache("prune", "--older-than", bad, "--cache-dir", str(populated))
        assert code == 2 and f"--older-than: {bad!r} is not a duration" in err and "30m" in err
    code, _, err = cache("prune", "--older-than", "30", "--cache-dir", str(populated))
    assert code == 2 and "--older-than: '30' has no unit" in err and "fix: write the unit, e.g. 30d (days)" in err
    assert len(list_entries(populated)) == 4, "a refused value removes nothing"


@pytest.mark.parametrize("older_than", ["30d", "720h", "4w", "1.5w", "30-00:00:00"])
def test_cli_prune_older_than_takes_the_one_duration_grammar(populated: Path, older_than: str) -> None:
    code, out, _ = cache("prune", "--older-than", older_than, "--dry-run", "--cache-dir", str(populated))
    assert code == 0 and "would remove env abd456" in out and "abc123" not in out


def test_cli_rm_by_unique_prefix(populated: Path) -> None:
    code, out, _ = cache("rm", "img", "--cache-dir", str(populated))
    assert code == 0 and "removed image img789" in out
    assert "img789" not in [e.name for e in list_entries(populated)]


def test_cli_rm_ambiguous_prefix_lists_candidates(populated: Path) -> None:
    code, _, err = cache("rm", "ab", "--cache-dir", str(populated))
    assert code == 2
    assert "matches 2 entries" in err and "env/abc123" in err and "env/abd456" in err
    assert len(list_entries(populated)) == 4


def test_cli_rm_unknown_name_removes_nothing(populated: Path) -> None:
    code, _, err = cache("rm", "img789", "nope", "--cache-dir", str(populated))
    assert code == 2 and "no entry 'nope'" in err and "env/abc123" in err
    assert len(list_entries(populated)) == 4


def test_cli_rm_busy_entry_exits_1(populated: Path) -> None:
    with entry_lock(populated, "image", "img789"):
        code, out, err = cache("rm", "img789", "abc", "--cache-dir", str(populated))
    assert code == 1 and "in use by a build" in err and "removed env abc123" in out


def test_cli_rm_all_and_usage_errors(populated: Path) -> None:
    assert cache("rm", "--cache-dir", str(populated))[0] == 2
    assert cache("rm", "abc", "--all", "--cache-dir", str(populated))[0] == 2
    code, _, _ = cache("rm", "--all", "--cache-dir", str(populated))
    assert code == 0 and list_entries(populated) == []


def test_cli_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert cache("dir", "--cache-dir", str(tmp_path))[1].strip() == str(tmp_path)
    monkeypatch.setenv("ENVBUILD_CACHE_DIR", str(tmp_path / "env-store"))
    assert cache("dir")[1].strip() == str(tmp_path / "env-store")


def test_store_paths_name_every_place_the_layout_describes() -> None:
    from envbuild.store.layout import StorePaths

    store = StorePaths("/s")
    assert store.base("b").rootfs == "/s/bases/b/rootfs"
    assert store.env("e").freeze == "/s/envs/e/freeze.txt"
    assert store.image("i").image == "/s/images/i/image.sif"
    assert (store.image("i").complete, store.image("i").meta) == ("/s/images/i/complete", "/s/images/i/meta.json")
    assert store.work("x-1") == "/s/work/x-1"
    assert store.download_cache("uv") == "/s/uv"
    assert store.lock("env", "e") == "/s/locks/env-e.lock"
