"""A hard-linked copy of a store entry another user made: the kernel's fs.protected_hardlinks refuses the links
(`cp -al`: "cannot create hard link ... Operation not permitted"), so in a group store such an entry is copied in
full instead. Run for real as the unprivileged test account (provision/users.sh) on a tree root owns, for each
place a build copies a store tree (the planned copy, the parent layer's prefetch, the layered image's merge),
and a scan of envbuild/ fails on a linked copy made anywhere but envbuild.shared.treecopy."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from envbuild.builder.execute.fsactions import planned_copy_argv
from envbuild.builder.plan.actions import CopyTree
from envbuild.shared.safefiles import may_link_files_of
from tests.conftest import REPO

USER = os.environ.get("ENVBUILD_TEST_USER", "envbuild-ci")


def test_a_tree_of_ones_own_is_linked(tmp_path: Path) -> None:
    action = CopyTree(str(tmp_path), str(tmp_path / "copy"), hardlink=True)
    assert may_link_files_of(str(tmp_path))
    assert planned_copy_argv(action) == action.argv() == ("cp", "-al", str(tmp_path), str(tmp_path / "copy"))


@pytest.mark.skipif(os.geteuid() != 0, reason="makes a tree another user owns: needs root")
def test_another_users_tree_is_copied_and_the_copy_works_as_that_user() -> None:
    user = pwd.getpwnam(USER)
    # not under pytest's own temporary directory, which only root may enter
    tmp_path = Path(tempfile.mkdtemp(prefix="envbuild-copy-owner-", dir="/var/tmp"))
    tree = tmp_path / "entry" / "rootfs"
    (tree / "etc").mkdir(parents=True)
    (tree / "etc" / "os-release").write_text("ID=debian\n")  # root's, as a member's base in a group store
    work = tmp_path / "work"
    work.mkdir()
    os.chown(work, user.pw_uid, user.pw_gid)
    tmp_path.chmod(0o755)
    (tmp_path / "entry").chmod(0o755)
    code = (
        "import subprocess, sys\n"
        "from envbuild.builder.execute.fsactions import planned_copy_argv\n"
        "from envbuild.builder.plan.actions import CopyTree\n"
        "action = CopyTree(sys.argv[1], sys.argv[2], hardlink=True)\n"
        "linked = subprocess.run(action.argv() + (), capture_output=True, text=True)\n"
        "print('linked', linked.returncode, linked.stderr.strip()[:200])\n"
        "chosen = subprocess.run(planned_copy_argv(CopyTree(sys.argv[1], sys.argv[3], hardlink=True)), capture_output=True,"
        " text=True)\n"
        "print('chosen', chosen.returncode, ' '.join(planned_copy_argv(action)[:2]))\n"
        "from envbuild.sif.layeredwriter import merge_upper\n"
        "import os\n"
        "upper = sys.argv[4]\n"
        "os.makedirs(upper + '/opt/env', exist_ok=True)\n"
        "open(upper + '/opt/env/marker', 'w').write('new')\n"
        "merge_upper(sys.argv[1], upper, sys.argv[5])\n"
        "print('merged', open(sys.argv[5] + '/etc/os-release').read().strip(), open(sys.argv[5] + '/opt/env/marker').read())\n"
        "from envbuild.builder.sessions.prefetch import ParentPrefetch\n"
        "work = sys.argv[6]\n"
        "prefetch = ParentPrefetch(parent='p', store_root=os.path.dirname(work), work_dir=work, tree=work + '/rootfs',\n"
        "                          snapshot=work + '/parent.snapshot')\n"
        "prefetch.start(sys.argv[1])\n"
        "prefetch._thread.join()\n"
        "print('prefetched', prefetch._failure or 'ok', open(work + '/rootfs/etc/os-release').read().strip())\n"
    )
    done = subprocess.run(["runuser", "-u", USER, "--", sys.executable, "-c", code, str(tree), str(work / "linked"),
                           str(work / "partial"),
                           str(work / "upper"), str(work / "merged"), str(work / "prefetch")],
                          capture_output=True, text=True, timeout=60, cwd="/", env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    lines = dict(line.split(" ", 1) for line in done.stdout.splitlines())
    assert lines["linked"].startswith("1 ") and "Operation not permitted" in lines["linked"], done.stdout
    assert lines["chosen"] == "0 cp -a", done.stdout
    assert lines["merged"] == "ID=debian new", done.stdout
    assert lines["prefetched"] == "ok ID=debian", done.stdout
    try:
        assert (work / "partial" / "etc" / "os-release").read_text() == "ID=debian\n"
    finally:
        shutil.rmtree(tmp_path)


def test_store_trees_are_copied_only_through_the_shared_decision() -> None:
    """A `cp -al` written anywhere else would fail for a member of a group store on another member's entry."""
    offenders = []
    for path in sorted((REPO / "envbuild").rglob("*.py")):
        if path.parent.name == "shared" and path.name in ("treecopy.py", "safefiles.py"):
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if '"-al"' in line or "'-al'" in line or "os.link(" in line:
                offenders.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    assert not offenders, "copy store trees with envbuild.shared.treecopy:\n" + "\n".join(offenders)
