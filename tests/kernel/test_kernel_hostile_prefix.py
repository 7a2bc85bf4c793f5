"""`envrun kernel remove` and `install --force` beside another member's kernels (issue 40), with two real users:
the victim (the unprivileged account) runs envrun, the attacker (the stranger) planted a kernel of the same name
in a prefix on JUPYTER_PATH that everyone may write. What is removed is recomputed from the kernel's name (its
own kernel directory, its log in the state directory), never read from a kernel.json; a kernel directory that
is not the victim's own is never removed. Needs root to switch users (CI runs the tests as root)."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from envbuild.kernel.kernelspec import KernelEntry, kernelspec
from tests.support.trust_accounts import ENVRUN, as_user, stranger, unprivileged

NAME = "envrun-env"


@dataclass
class World:
    home: Path  # the victim's, 0700
    own_kernel: Path  # the victim's kernel directory in its Jupyter data directory
    log: Path  # the victim's kernel log, where envrun puts it
    prefix: Path  # a Jupyter prefix everyone may write (a group prefix, to its members)
    planted: Path  # the attacker's kernel directory of the same name there
    env: dict[str, str]


def _kernel_json(directory: Path, entry: KernelEntry) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "kernel.json").write_text(json.dumps(kernelspec(entry, str(directory), "test"), indent=1))


def _entry(log: str, overlay: str = "") -> KernelEntry:
    return KernelEntry(name=NAME, display_name="env (envrun)", image="/images/env.sif", overlays=(),
                       ipykernel_overlay=overlay, python="python", system="", binds=(), log=log, envrun=ENVRUN)


def _chown_tree(root: Path, uid: int, gid: int) -> None:
    for path in [root, *root.rglob("*")]:
        os.lchown(path, uid, gid)


@pytest.fixture
def world() -> Iterator[World]:
    if os.geteuid() != 0:
        pytest.skip("two users need root to set up (CI runs the tests as root)")
    victim, attacker = unprivileged(), stranger()
    base = Path(tempfile.mkdtemp(prefix="envrun-kernel-hostile-", dir="/var/tmp"))
    base.chmod(0o711)
    try:
        home = base / "home"
        (home / "Documents").mkdir(parents=True)
        (home / "Documents/notes.md").write_text("# notes\n")
        (home / "thesis.tex").write_text("the victim's thesis\n")
        own_kernel = home / ".local/share/jupyter/kernels" / NAME
        log = home / ".local/state/envrun/kernels" / f"{NAME}.log"
        _kernel_json(own_kernel, _entry(str(log)))
        log.parent.mkdir(parents=True)
        log.write_text("a start\n")
        _chown_tree(home, victim.pw_uid, victim.pw_gid)
        home.chmod(0o700)

        prefix = base / "group"
        kernels = prefix / "share/jupyter/kernels"
        kernels.mkdir(parents=True)
        for path in (prefix, prefix / "share", prefix / "share/jupyter", kernels):
            path.chmod(0o777)
        # The attacker's kernel.json names the victim's thesis as its log, and as its ipykernel overlay a path
        # whose directory is ~/Documents through a link (ATTACK/kernels -> ~).
        attack = base / "attack"
        attack.mkdir()
        (attack / "kernels").symlink_to(home)
        planted = kernels / NAME
        _kernel_json(planted, _entry(str(home / "thesis.tex"), str(attack / "kernels/Documents/ipykernel.sqsh")))
        _chown_tree(attack, attacker.pw_uid, attacker.pw_gid)
        _chown_tree(planted, attacker.pw_uid, attacker.pw_gid)
        planted.chmod(0o777)
        (planted / "kernel.json").chmod(0o666)
        env = {"HOME": str(home), "JUPYTER_PATH": str(prefix / "share/jupyter"), "PYTHONDONTWRITEBYTECODE": "1"}
        yield World(home, own_kernel, log, prefix, planted, env)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _victims_files_intact(world: World) -> None:
    assert (world.home / "thesis.tex").read_text() == "the victim's thesis\n"
    assert (world.home / "Documents/notes.md").read_text() == "# notes\n"


def test_remove_takes_the_victims_own_kernel_and_log_never_what_a_shadowing_kernel_json_names(world: World) -> None:
    result = as_user(unprivileged(), [ENVRUN, "kernel", "remove", NAME], cwd=world.home, env_extra=world.env)
    assert result.returncode == 0, result.stdout + result.stderr
    _victims_files_intact(world)
    assert (world.planted / "kernel.json").is_file(), "another user's kernel is not removed"
    assert not world.own_kernel.exists() and not world.log.exists()
    assert f"removed kernel {NAME}: {world.own_kernel}" in result.stdout
    assert f"removed its log {world.log}" in result.stdout
    assert f"note: another kernel named {NAME} is not removed: {world.planted} belongs to" in result.stdout


def test_a_kernel_of_another_user_alone_is_refused_with_a_clear_message(world: World) -> None:
    shutil.rmtree(world.own_kernel)
    result = as_user(unprivileged(), [ENVRUN, "kernel", "remove", NAME], cwd=world.home, env_extra=world.env)
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"no kernel named {NAME} of yours: {world.planted} belongs to {stranger().pw_name}" in result.stderr
    assert "envrun removes only kernels you installed" in result.stderr
    _victims_files_intact(world)
    assert (world.planted / "kernel.json").is_file() and world.log.exists()


def test_remove_with_the_prefix_never_follows_a_kernel_directory_planted_as_a_link(world: World) -> None:
    shutil.rmtree(world.planted)
    world.planted.symlink_to(world.home / "Documents")
    os.lchown(world.planted, stranger().pw_uid, stranger().pw_gid)
    shutil.rmtree(world.own_kernel)
    result = as_user(unprivileged(), [ENVRUN, "kernel", "remove", NAME, "--prefix", str(world.prefix)],
                     cwd=world.home, env_extra=world.env)
    assert result.returncode == 2 and "is a symbolic link, not a kernel directory" in result.stderr, result.stderr
    _victims_files_intact(world)
    assert world.planted.is_symlink()


# -- install --force and the kernel's log, in process (root is the user here) --------------------------------


def test_install_force_replaces_only_the_users_own_kernel_directory(tmp_path: Path) -> None:
    from envbuild.commands.kernel import _write_kernel
    from envbuild.shared.errors import UsageError

    if os.geteuid() != 0:
        pytest.skip("a stranger's directory needs root to plant (CI runs the tests as root)")
    kernels = tmp_path / "kernels"
    kernels.mkdir()
    kernels.chmod(0o777)
    documents = tmp_path / "Documents"
    documents.mkdir()
    (documents / "notes.md").write_text("# notes\n")
    spec = kernelspec(_entry(str(tmp_path / "state/envrun/kernels/x.log")), str(kernels / NAME), "test")

    (kernels / NAME).symlink_to(documents)  # a link at the name: refused, never followed
    with pytest.raises(UsageError, match="is a symbolic link, not a kernel directory"):
        _write_kernel(str(kernels / NAME), spec, replace=True)
    assert (documents / "notes.md").read_text() == "# notes\n" and (kernels / NAME).is_symlink()

    (kernels / NAME).unlink()  # another user's kernel directory: refused with who owns it
    (kernels / NAME).mkdir()
    os.chown(kernels / NAME, stranger().pw_uid, stranger().pw_gid)
    with pytest.raises(UsageError, match=f"belongs to {stranger().pw_name}"):
        _write_kernel(str(kernels / NAME), spec, replace=True)
    assert [p.name for p in kernels.iterdir()] == [NAME], "no partial directory left behind"

    (kernels / NAME).rmdir()  # the user's own: replaced, through the kernels directory's descriptor
    (kernels / NAME).mkdir()
    (kernels / NAME / "old").symlink_to(documents)
    _write_kernel(str(kernels / NAME), spec, replace=True)
    assert sorted(p.name for p in (kernels / NAME).iterdir()) == ["kernel.json"]
    assert (documents / "notes.md").read_text() == "# notes\n"


@pytest.mark.parametrize(("log", "name", "place"), [
    ("/home/u/.local/state/envrun/kernels/envrun-env.log", "envrun-env", "/home/u/.local/state"),
    ("/home/u/thesis.tex", "envrun-env", None),
    ("/home/u/.local/state/envrun/kernels/other.log", "envrun-env", None),
    ("/home/u/x/kernels/envrun-env.log", "envrun-env", None),
    ("envrun/kernels/envrun-env.log", "envrun-env", None),
    ("/s/envrun/kernels/...log", "..", None),
])
def test_a_kernel_writes_its_log_only_where_envrun_puts_logs(log: str, name: str, place: str | None) -> None:
    from envbuild.kernel.kernelspec import log_place

    assert log_place(log, name) == place
