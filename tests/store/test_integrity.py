"""Store entries' content records (envbuild.store.integrity): what is recorded, who else can write an entry,
and `envbuild cache verify` finding a tampered image, base and env layer in a store, with entries owned by
a stranger (uid 65534) as in a store shared by a group."""

from __future__ import annotations

import grp
import json
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from envbuild.cli.cache_cmds import cache_group
from envbuild.shared.treedigest import tree_digest
from envbuild.store.integrity import (
    FileDigest,
    digest_of_file,
    file_problem,
    is_private_group,
    others_can_write,
    read_content_record,
    verify_entries,
    write_content_record,
)
from envbuild.store.layout import kind_dir

STRANGER = 65534  # nobody


def make_image(root: Path, name: str = "tiny-0123456789abcdef", content: bytes = b"SIF" * 1000, *,
               record: bool = True) -> Path:
    entry = kind_dir(root, "image") / name
    entry.mkdir(parents=True)
    (entry / "image.sif").write_bytes(content)
    (entry / "meta.json").write_text("{}\n")
    if record:
        write_content_record(entry, files=("image.sif",))
    (entry / "complete").write_text("tiny\n")
    return entry


def make_base(root: Path, name: str = "debootstrap-bookworm-0123456789abcdef", *, record: bool = True) -> Path:
    entry = kind_dir(root, "base") / name
    (entry / "rootfs" / "etc").mkdir(parents=True)
    (entry / "rootfs" / "etc" / "os-release").write_text("ID=debian\n")
    os.symlink("usr/bin", entry / "rootfs" / "bin")
    digest = tree_digest(str(entry / "rootfs"))
    (entry / "digest").write_text(digest + "\n")
    if record:
        write_content_record(entry, trees={"rootfs": digest})
    (entry / "complete").write_text("debootstrap:bookworm\n")
    return entry


def make_env(root: Path, name: str = "tiny-env-0123456789abcdef", *, record: bool = True) -> Path:
    """A complete env layer as the env step leaves it: its tree, meta, freeze and (`record`) tree digest."""
    entry = kind_dir(root, "env") / name
    site = entry / "rootfs" / "opt" / "envbuild" / "venv" / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    (site / "six.py").write_text("# six\n")
    (entry / "meta.json").write_text(json.dumps({"kind": "env", "compat": "c" * 64, "parent": None,
                                                 "requirements": ["six"]}) + "\n")
    (entry / "freeze.txt").write_text("six==1.16.0\n")
    if record:
        (entry / "digest").write_text(tree_digest(str(entry / "rootfs")) + "\n")
    (entry / "complete").write_text("tiny\n")
    return entry


def project_gid() -> int:
    """A group other than the user's own private one, as a project's: root may give any (Debian's `users`);
    another user one they are in."""
    if os.geteuid() == 0:
        return grp.getgrnam("users").gr_gid
    for gid in os.getgroups():
        if not is_private_group(gid):
            return gid
    pytest.skip("needs a group besides the user's own")


def share(path: Path, mode: int = 0o2775) -> None:
    """`path` as a project's group shares it: its group, group-writable (setgid for directories)."""
    os.chown(path, -1, project_gid())
    os.chmod(path, mode if path.is_dir() else path.stat().st_mode | 0o020)


def chown_tree(top: Path, uid: int) -> None:
    for directory, subdirs, files in os.walk(top):
        for name in (*subdirs, *files):
            os.lchown(os.path.join(directory, name), uid, uid)
    os.lchown(top, uid, uid)


def test_the_record_holds_size_and_sha256_and_reads_back(tmp_path: Path) -> None:
    entry = make_image(tmp_path, content=b"abc")
    record = read_content_record(entry)
    assert record is not None
    assert record.files["image.sif"] == FileDigest(3, "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
    assert json.loads((entry / "content.json").read_text())["version"] == 1


@pytest.mark.parametrize("text", ["", "{not json", "[]", '{"version": 2, "files": {}}',
                                  '{"version": 1, "files": {"image.sif": {"size": "3", "sha256": "sha256:ab"}}}',
                                  '{"version": 1, "files": {"image.sif": {"size": 3, "sha256": "md5:x"}}}'])
def test_a_record_envbuild_did_not_write_is_no_record(tmp_path: Path, text: str) -> None:
    entry = make_image(tmp_path)
    (entry / "content.json").write_text(text)
    assert read_content_record(entry) is None


def test_size_is_checked_always_and_the_hash_when_asked(tmp_path: Path) -> None:
    entry = make_image(tmp_path, content=b"a" * 100)
    recorded = read_content_record(entry).files["image.sif"]  # type: ignore[union-attr]
    (entry / "image.sif").write_bytes(b"b" * 100)  # same size, other bytes
    assert file_problem("image.sif", entry / "image.sif", recorded, full=False) is None
    assert "its record says sha256:" in (file_problem("image.sif", entry / "image.sif", recorded, full=True) or "")
    (entry / "image.sif").write_bytes(b"b" * 99)
    assert file_problem("image.sif", entry / "image.sif", recorded, full=False) == "image.sif is 99 bytes, its record says 100"
    assert file_problem("image.sif", entry / "image.sif", None, full=False) == "no digest recorded for image.sif"
    assert digest_of_file(entry / "image.sif").size == 99


def test_a_store_only_the_user_can_write_is_private(tmp_path: Path) -> None:
    root = tmp_path / "store"
    entry = make_image(root)
    for path in (root, kind_dir(root, "image"), entry):
        path.chmod(0o755)
    assert others_can_write(root, entry, ("image.sif",)) is None


@pytest.mark.parametrize("where", ["root", "kind", "entry", "file", "record"])
def test_a_group_writable_part_makes_the_store_shared(tmp_path: Path, where: str) -> None:
    root = tmp_path / "store"
    entry = make_image(root)
    for path in (root, kind_dir(root, "image"), entry):
        path.chmod(0o755)
    path = {"root": root, "kind": kind_dir(root, "image"), "entry": entry, "file": entry / "image.sif",
            "record": entry / "content.json"}[where]
    share(path)
    assert others_can_write(root, entry, ("image.sif",)) == \
        f"{path} is writable by its group ({grp.getgrgid(project_gid()).gr_name})"


def test_the_users_own_group_writing_is_the_user_writing(tmp_path: Path) -> None:
    """With a group per user and umask 002 (Debian, Red Hat), the user's own store is group-writable by a group
    only they are in: that is still a store only they can write."""
    root = tmp_path / "store"
    entry = make_image(root)
    for path in (root, kind_dir(root, "image"), entry):
        os.chown(path, -1, os.getegid())
        path.chmod(0o775)
    private = is_private_group(os.getegid())
    assert (others_can_write(root, entry, ("image.sif",)) is None) is private
    if os.geteuid() == 0:
        assert private  # root's group is root's own


def test_an_entry_owned_by_a_stranger_makes_the_store_shared(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("chown to a stranger needs root (CI runs the tests as root)")
    root = tmp_path / "store"
    entry = make_image(root)
    for path in (root, kind_dir(root, "image"), entry):
        path.chmod(0o755)
    chown_tree(entry, STRANGER)
    assert f"belongs to user nobody (uid {STRANGER})" in (others_can_write(root, entry, ("image.sif",)) or "")


def test_a_symlinked_entry_is_not_the_users_alone(tmp_path: Path) -> None:
    root = tmp_path / "store"
    real = make_image(tmp_path / "elsewhere")
    kind_dir(root, "image").mkdir(parents=True)
    os.symlink(real, kind_dir(root, "image") / real.name)
    assert others_can_write(root, kind_dir(root, "image") / real.name) == f"{root / 'images' / real.name} is a symbolic link"


# --- envbuild cache verify -----------------------------------------------------------------------------


def verify(root: Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cache_group, ["verify", "--cache-dir", str(root), *args])
    return result.exit_code, result.output


@pytest.fixture
def shared_store(tmp_path: Path) -> Path:
    """A group-writable store with an image and a base, both made (owned) by a stranger where the tests run
    as root, as in a store a project's group shares."""
    root = tmp_path / "store"
    make_image(root)
    make_base(root)
    make_env(root)
    for directory in (root, *root.glob("*"), *root.glob("*/*")):
        share(directory)
    if os.geteuid() == 0:
        for entry in (*root.glob("images/*"), *root.glob("bases/*"), *root.glob("envs/*")):
            chown_tree(entry, STRANGER)
    base = next(root.glob("bases/*"))
    digest = tree_digest(str(base / "rootfs"))  # as its maker recorded it: owners are part of a tree's digest
    (base / "digest").write_text(digest + "\n")
    write_content_record(base, trees={"rootfs": digest})
    env = next(root.glob("envs/*"))
    (env / "digest").write_text(tree_digest(str(env / "rootfs")) + "\n")
    return root


def test_an_untampered_store_verifies_clean(shared_store: Path) -> None:
    code, output = verify(shared_store)
    assert code == 0, output
    lines = output.splitlines()
    assert lines[0].startswith("ok          base/debootstrap-bookworm-0123456789abcdef  rootfs: sha256:")
    assert lines[1].startswith("ok          env/tiny-env-0123456789abcdef  rootfs: sha256:")
    assert lines[2].startswith("ok          image/tiny-0123456789abcdef  image.sif: sha256:")
    assert lines[3] == f"3 entries under {shared_store}: 3 ok, 0 mismatch"


@pytest.mark.parametrize("tamper", ["edited", "added", "mode"])
def test_verify_finds_a_tampered_env_layer(shared_store: Path, tamper: str) -> None:
    """An env layer's files are hard-linked into every image built on it: a file edited in place (same size),
    one planted in the tree, or a mode changed is a mismatch."""
    site = next(shared_store.glob("envs/*/rootfs/opt/envbuild/venv/lib/python3.11/site-packages"))
    if tamper == "edited":
        (site / "six.py").write_text("# evl\n")
    elif tamper == "added":
        (site / "sitecustomize.py").write_text("import os; os.system('id')\n")
    else:
        (site / "six.py").chmod(0o777)
    code, output = verify(shared_store)
    assert code == 1
    assert "MISMATCH    env/tiny-env-0123456789abcdef  rootfs has sha256:" in output and ", its record says sha256:" in output
    assert f"error: 1 entry of {shared_store} does not match its content record" in output


def test_an_env_layer_without_a_recorded_digest_is_unrecorded(tmp_path: Path) -> None:
    root = tmp_path / "store"
    make_env(root, record=False)
    make_env(root, "other-env-0123456789abcdef")
    (kind_dir(root, "env") / "other-env-0123456789abcdef" / "digest").write_text("sha256:not-a-digest\n")
    code, output = verify(root)
    assert code == 0
    assert "unrecorded  env/tiny-env-0123456789abcdef  no recorded tree digest for rootfs" in output
    assert "unrecorded  env/other-env-0123456789abcdef  no recorded tree digest for rootfs" in output


def test_verify_finds_a_tampered_image_and_a_tampered_base(shared_store: Path) -> None:
    image = shared_store / "images" / "tiny-0123456789abcdef" / "image.sif"
    image.write_bytes(b"EVIL" * 750)  # the same size: only the hash tells
    base = shared_store / "bases" / "debootstrap-bookworm-0123456789abcdef"
    (base / "rootfs" / "etc" / "ld.so.preload").write_text("/tmp/evil.so\n")

    code, output = verify(shared_store)

    assert code == 1
    assert "MISMATCH    image/tiny-0123456789abcdef  image.sif has sha256:" in output
    assert "MISMATCH    base/debootstrap-bookworm-0123456789abcdef  rootfs has sha256:" in output
    assert "2 mismatch" in output
    assert "error: 2 entries of" in output and "fix: remove them" in output


def test_verify_finds_a_tampered_base_digest_file(shared_store: Path) -> None:
    base = shared_store / "bases" / "debootstrap-bookworm-0123456789abcdef"
    (base / "digest").write_text("sha256:" + "0" * 64 + "\n")
    code, output = verify(shared_store)
    assert code == 1
    assert f"the digest file says sha256:{'0' * 64}, the content has sha256:" in output
    assert f"error: 1 entry of {shared_store} does not match its content record" in output
    assert f"fix: remove it (`envbuild cache rm --cache-dir {shared_store} KIND/NAME`)" in output


def test_entries_without_a_record_are_listed_not_failed(tmp_path: Path) -> None:
    root = tmp_path / "store"
    make_image(root, record=False)
    base = make_base(root, record=False)  # its digest file is the tree's: still checked
    code, output = verify(root)
    assert code == 0
    assert "unrecorded  image/tiny-0123456789abcdef  no content record for image.sif" in output
    assert f"ok          base/{base.name}" in output
    (base / "rootfs" / "etc" / "os-release").write_text("ID=evil\n")
    assert verify(root)[0] == 1


def test_verify_json(shared_store: Path) -> None:
    (shared_store / "images" / "tiny-0123456789abcdef" / "image.sif").write_bytes(b"short")
    code, output = verify(shared_store, "--json")
    assert code == 1
    data = json.loads(output)
    assert data["store"] == str(shared_store)
    assert data["summary"] == {"ok": 2, "mismatch": 1, "unrecorded": 0, "unverifiable": 0, "unchecked": 0}
    image = next(e for e in data["entries"] if e["kind"] == "image")
    assert image["status"] == "mismatch" and image["details"] == ["image.sif is 5 bytes, its record says 3000"]


def test_verify_skips_unfinished_entries(tmp_path: Path) -> None:
    root = tmp_path / "store"
    entry = make_image(root)
    (entry / "complete").unlink()
    assert list(verify_entries(root)) == []
    assert verify(root) == (0, f"the store {root} holds no complete entry\n")


# --- two real users --------------------------------------------------------------------------------------

REPO = Path(__file__).resolve().parents[2]


def _account(variable: str, default: str) -> pwd.struct_passwd | None:
    try:
        return pwd.getpwnam(os.environ.get(variable, default))
    except KeyError:
        return None


def as_account(account: pwd.struct_passwd, code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["setpriv", f"--reuid={account.pw_uid}", f"--regid={account.pw_gid}", "--clear-groups",
                           str(REPO / ".venv/bin/python"), "-c", code, *args],
                          capture_output=True, text=True, cwd="/", timeout=120, env={"PATH": os.environ["PATH"],
                                                                                     "PYTHONPATH": str(REPO)})


TAKE = """
import sys
from pathlib import Path
from envbuild.builder.sessions.storetrust import take_stored_file
from envbuild.store.layout import kind_dir
store, entry, partial = sys.argv[1:]
ok = take_stored_file(Path(store), "image", entry, "image.sif", partial, say=print)
print("taken" if ok else "refused", "copy left" if Path(partial).exists() else "no copy")
"""

PLANT = """
import os, shutil, sys
entry = sys.argv[1]
os.rename(entry, entry + ".old")  # the kind directory lets anyone rename (no sticky bit)
os.mkdir(entry)
for name in ("content.json", "complete", "meta.json"):
    shutil.copy(os.path.join(entry + ".old", name), entry)  # the victim's record, kept to look right
with open(os.path.join(entry, "image.sif"), "wb") as handle:
    handle.write(b"EVIL" * 750)
"""


def test_an_entry_a_stranger_planted_in_the_users_store_is_not_taken(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Two accounts (provision/users.sh): the user's store has a world-writable images/ directory; the
    stranger swaps the user's image entry for one of their own with the user's record. Reusing it as the
    user hashes the copy and refuses it; `envbuild cache verify` as the user finds it."""
    user, stranger = _account("ENVBUILD_TEST_USER", "envbuild-ci"), _account("ENVBUILD_TEST_STRANGER", "envbuild-stranger")
    if os.geteuid() != 0 or user is None or stranger is None:
        pytest.skip("needs root and the test accounts of provision/users.sh")
    top = Path(tempfile.mkdtemp(dir="/var/tmp", prefix="envbuild-two-users-"))
    try:
        top.chmod(0o755)  # both can reach it, as a project directory
        store = top / "store"
        entry = make_image(store)
        os.chmod(kind_dir(store, "image"), 0o777)
        for path in (store, *store.rglob("*")):
            os.lchown(path, user.pw_uid, user.pw_gid)
        out = top / "out"
        out.mkdir()
        os.chown(out, user.pw_uid, user.pw_gid)
        partial = str(out / "tiny.sif.partial-1")

        before = as_account(user, TAKE, str(store), str(entry), partial)
        assert before.stdout.splitlines()[-1] == "taken copy left", before.stdout + before.stderr
        assert "writable by every user" not in before.stdout  # no warning: it matched
        os.unlink(partial)

        planted = as_account(stranger, PLANT, str(entry))
        assert planted.returncode == 0, planted.stderr
        assert (entry / "image.sif").stat().st_uid == stranger.pw_uid

        after = as_account(user, TAKE, str(store), str(entry), partial)
        assert after.stdout.splitlines()[-1] == "refused no copy", after.stdout + after.stderr
        assert f"warning: image entry {entry.name} in the store {store} does not match its content record" in after.stdout
        assert f"{store / 'images'} is writable by every user" in after.stdout

        verify_run = subprocess.run(["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups",
                                     str(REPO / "bin/envbuild"), "cache", "verify", "--cache-dir", str(store)],
                                    capture_output=True, text=True, cwd="/", timeout=120)
        assert verify_run.returncode == 1, verify_run.stdout + verify_run.stderr
        assert f"MISMATCH    image/{entry.name}  image.sif has sha256:" in verify_run.stdout
    finally:
        shutil.rmtree(top)


# --- an env layer's record, reusing its parent's per-file digests -------------------------------------


def test_a_layer_on_a_parent_records_the_same_digest_reading_only_its_own_files(tmp_path: Path,
                                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """What the env step records for a layer hard-linked from its parent (envbuild.shared.treedigest.main, as the
    RecordDigest action runs it): the full tree digest, with the parent's files not read again."""
    import envbuild.shared.treedigest as treedigest

    parent = make_env(tmp_path, "parent-0123456789abcdef", record=False)
    treedigest.main([str(parent / "rootfs"), str(parent / "digest"), "", str(parent / "file-digests")])
    assert (parent / "digest").read_text().strip() == tree_digest(str(parent / "rootfs"))
    child = tmp_path / "envs" / "child"
    child.mkdir()
    subprocess.run(["cp", "-al", str(parent / "rootfs"), str(child / "rootfs")], check=True)
    site = next(child.glob("rootfs/opt/envbuild/venv/lib/*/site-packages"))
    (site / "tabulate.py").write_text("# tabulate\n")
    read: list[str] = []
    real = treedigest.file_digest
    monkeypatch.setattr(treedigest, "file_digest", lambda path: read.append(os.path.basename(path)) or real(path))
    treedigest.main([str(child / "rootfs"), str(child / "digest"), str(parent / "file-digests"),
                     str(child / "file-digests")])
    assert read == ["tabulate.py"]
    monkeypatch.setattr(treedigest, "file_digest", real)
    assert (child / "digest").read_text().strip() == tree_digest(str(child / "rootfs"))
    assert len(treedigest.read_file_digests(str(child / "file-digests"))) == 2


def test_forged_per_file_digests_can_only_make_a_record_that_fails_verification(tmp_path: Path) -> None:
    """Whoever can write a parent's file-digests can make a new layer's record wrong, never a tampered tree
    verify: verifying reads every file."""
    import envbuild.shared.treedigest as treedigest

    parent = make_env(tmp_path, "parent-0123456789abcdef")
    found: dict[tuple[int, int, int], str] = {}
    tree_digest(str(parent / "rootfs"), found=found)
    treedigest.write_file_digests(str(parent / "file-digests"), {key: "sha256:" + "0" * 64 for key in found})
    treedigest.main([str(parent / "rootfs"), str(tmp_path / "recorded"), str(parent / "file-digests"), ""])
    assert (tmp_path / "recorded").read_text().strip() != (parent / "digest").read_text().strip()
    (parent / "digest").write_text((tmp_path / "recorded").read_text())
    assert verify_entries(tmp_path).__next__().status == "mismatch"
    # Read back as fixed-size records of numbers and digests, whatever the bytes; a torn file is none.
    for garbage, entries in ((b"", 0), (b"x" * 57, 0), (b"\xff" * 112, 1)):
        (parent / "file-digests").write_bytes(garbage)
        assert len(treedigest.read_file_digests(str(parent / "file-digests"))) == entries
