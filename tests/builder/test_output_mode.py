"""An image that holds a file others cannot read is itself unreadable to them (issue 40).

A `files:` entry without `mode:` keeps its source's bits inside the image, and the warning said "other users of the
image cannot read it". They could: the output SIF was 0755 under umask 022, and anyone who can read an image reads
every file in it (`unsquashfs -cat`); a Dockerfile's `COPY ~/.ssh/id_rsa` put the key there. Now the output copy
gives no permission to the readers (group, others) who cannot read a source on this host, from the copy's creation
on, and the warning says so. An entry whose `mode:` grants them read says they may: then nothing is taken away.

Why narrow the image rather than refuse the build: on a shared cluster a user copies a private config into an
image for their own jobs, and expects the image to be as private as the file, as `cp` keeps a file's mode; a
refusal would make them add a field to get what they meant. The warning names the fix for the other intent."""

from __future__ import annotations

import io
import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from envbuild.builder.execute.fsactions import copy_file
from envbuild.builder.plan.actions import CopyFile
from envbuild.builder.plan.imageplan import output_step, private_sources
from envbuild.envspec.loadspec import hidden_from, load_spec
from envbuild.envspec.specmodel import GROUP, OTHERS, FileCopy
from tests.support.plan_fixtures import fixed_request, with_overrides
from tests.support.trust_accounts import stranger

HEADER = "name: files-test\nsystem: local\nbase: debootstrap:bookworm\nfiles:\n"


def made(path: Path, mode: int, *, directory_mode: int = 0o755) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.parent.chmod(directory_mode)
    path.write_text("secret\n")
    path.chmod(mode)
    return path


@pytest.mark.parametrize(("mode", "directory_mode", "hidden"), [
    (0o644, 0o755, 0), (0o640, 0o755, OTHERS), (0o600, 0o755, GROUP | OTHERS), (0o604, 0o755, GROUP),
    (0o644, 0o700, GROUP | OTHERS),  # ~/.ssh/id_rsa.pub: readable, in a directory nobody else may enter
    (0o644, 0o750, OTHERS), (0o644, 0o711, 0),  # search is enough to reach a file whose name is known
])
def test_who_cannot_read_a_source(tmp_path: Path, mode: int, directory_mode: int, hidden: int) -> None:
    source = made(tmp_path / "dir" / "file", mode, directory_mode=directory_mode)
    try:
        assert hidden_from(str(source)) == hidden
    finally:
        source.parent.chmod(0o755)


def test_a_directory_source_is_as_private_as_its_most_private_file(tmp_path: Path) -> None:
    tmp_path.chmod(0o755)
    tree = tmp_path / "conf"
    made(tree / "public.txt", 0o644)
    assert hidden_from(str(tree)) == 0
    made(tree / "sub" / "token", 0o600)
    assert hidden_from(str(tree)) == GROUP | OTHERS
    (tmp_path / "link").symlink_to(tree / "sub" / "token")
    assert hidden_from(str(tmp_path / "link")) == GROUP | OTHERS  # a link source is judged by what it leads to
    assert hidden_from(str(tmp_path / "missing")) == GROUP | OTHERS


@pytest.mark.parametrize(("mode", "left"), [(None, GROUP | OTHERS), ("0644", 0), ("0640", OTHERS), ("0600", GROUP | OTHERS),
                                            ("0755", 0), ("0604", GROUP)])
def test_an_entry_mode_that_grants_read_speaks_for_those_readers(mode: str | None, left: int) -> None:
    assert FileCopy(src="a", dest="/a", mode=mode).readers_left_to_source == left


def test_the_warning_states_what_is_true(tmp_path: Path) -> None:
    key = made(tmp_path / "project" / "keys" / "id_rsa", 0o600)
    public = made(tmp_path / "project" / "ssh" / "id_rsa.pub", 0o644, directory_mode=0o700)
    spec = tmp_path / "project" / "spec.yaml"
    spec.write_text(HEADER + "  - {src: keys/id_rsa, dest: /opt/key}\n  - {src: ssh/id_rsa.pub, dest: /opt/pub}\n"
                    "  - {src: keys/id_rsa, dest: /opt/shared, mode: '0644'}\n")
    try:
        warnings = {w.field: w for w in load_spec(spec).warnings}
    finally:
        public.parent.chmod(0o755)
    first, second = warnings["files[0].src"], warnings["files[1].src"]
    assert "cannot be read by its group and others on this host (mode 0600" in first.message
    assert "the image file is written without permissions for group and others too (0644 becomes 0600)" in first.message
    assert "other users of the image cannot read it" not in first.message  # the old, untrue claim
    assert "in a directory of mode 0700" in second.message  # the old check looked at the file's bits only
    assert "mode: '0644'" in (first.hint or "") and "files[2].src" not in warnings
    assert key.exists()


def test_the_output_copy_carries_the_sources_its_readers_depend_on(tmp_path: Path) -> None:
    made(tmp_path / "project" / "key", 0o600)
    spec = tmp_path / "project" / "spec.yaml"
    spec.write_text(HEADER + "  - {src: key, dest: /opt/key}\n  - {src: key, dest: /opt/open, mode: '0644'}\n")
    loaded = load_spec(spec)
    request = with_overrides(fixed_request("envs/local-cpu-pytorch.yaml"), spec=loaded.spec,
                             spec_dir=str(spec.parent))
    assert private_sources(request) == ((str(spec.parent / "key"), GROUP | OTHERS),)
    [copy] = [a for a in output_step(request, "/store/image.sif", "put it").actions if isinstance(a, CopyFile)]
    assert copy.private_sources == private_sources(request)
    assert "without permissions for those who cannot read its files[] sources" in copy.describe()
    plain = fixed_request("envs/local-cpu-pytorch.yaml")  # no files[]: nothing changes
    assert private_sources(plain) == () and "files[]" not in output_step(plain, "/s.sif", "t").actions[0].describe()


def copied(tmp_path: Path, source_mode: int, image_mode: int = 0o644, entry_readers: int = GROUP | OTHERS) -> Path:
    secret = made(tmp_path / "project" / "secret", source_mode)
    image = tmp_path / "store" / "image.sif"
    image.parent.mkdir(exist_ok=True)
    image.write_bytes(b"an image holding the secret\n")
    image.chmod(image_mode)
    output = tmp_path / "out" / "env.sif"
    output.parent.mkdir(exist_ok=True)
    log = io.StringIO()
    copy_file(SimpleNamespace(_log=log), None, CopyFile(str(image), str(output),  # type: ignore[arg-type]
                                                        private_sources=((str(secret), entry_readers),)))
    return output


@pytest.mark.parametrize(("source_mode", "image_mode", "output_mode"), [
    (0o600, 0o644, 0o600), (0o640, 0o644, 0o640), (0o644, 0o644, 0o644), (0o600, 0o755, 0o700),
    (0o640, 0o664, 0o660), (0o644, 0o600, 0o600),  # never widened
])
def test_the_output_is_no_more_readable_than_its_sources(tmp_path: Path, source_mode: int, image_mode: int,
                                                         output_mode: int) -> None:
    output = copied(tmp_path, source_mode, image_mode)
    assert stat.S_IMODE(output.stat().st_mode) == output_mode
    assert output.read_bytes() == b"an image holding the secret\n"


def test_a_mode_that_grants_read_keeps_the_output_readable(tmp_path: Path) -> None:
    assert stat.S_IMODE(copied(tmp_path, 0o600, entry_readers=0).stat().st_mode) == 0o644


def read_as_stranger(path: Path) -> subprocess.CompletedProcess[str]:
    account = stranger()
    return subprocess.run(["setpriv", f"--reuid={account.pw_uid}", f"--regid={account.pw_gid}", "--clear-groups",
                           "cat", str(path)], capture_output=True, text=True, timeout=30, check=False)


@pytest.mark.skipif(os.geteuid() != 0, reason="reading as another user needs root to switch to them")
def test_another_user_cannot_read_the_image_of_a_private_file() -> None:
    """The issue's reproduction, as a real second user: the key copied into an image, read back with a plain read
    of the image file (what unsquashfs -cat starts with); a public file's image stays readable."""
    base = Path(tempfile.mkdtemp(prefix="envbuild-output-mode-"))  # pytest's tmp_path is 0700: nobody else gets in
    try:
        base.chmod(0o755)
        for name, source_mode, readable in (("private", 0o600, False), ("public", 0o644, True)):
            (base / name).mkdir(mode=0o755)
            output = copied(base / name, source_mode)
            output.parent.chmod(0o755)
            read = read_as_stranger(output)
            assert (read.returncode == 0) == readable, (name, read.stderr)
            assert readable or "Permission denied" in read.stderr
    finally:
        shutil.rmtree(base)
