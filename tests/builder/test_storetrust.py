"""A build that takes its image from the store, through the real session and executor (no container runtime:
the base and image entries are stand-ins, the image a real SIF): from a store others can write, a tampered
image.sif is not copied out, a tampered base is refused, and an entry owned by a stranger (uid 65534) is
checked in full; from the user's own store, only sizes are compared."""

from __future__ import annotations

import io
import os
from dataclasses import replace
from pathlib import Path

import pytest

from envbuild.builder.plan.imageplan import plan_base
from envbuild.builder.plan.layers import plan_layers
from envbuild.builder.plan.plandata import Layers
from envbuild.builder.sessions.buildrequest import BuildOptions, make_request
from envbuild.builder.sessions.imagesession import BuildSession
from envbuild.envspec.loadspec import LoadedSpec
from envbuild.shared.errors import EnvbuildError
from envbuild.shared.treedigest import tree_digest
from envbuild.store.integrity import write_content_record
from envbuild.store.layout import StorePaths, kind_dir
from tests.builder.test_buildsession import BuildStarted, write_sif, write_spec
from tests.store.test_integrity import share
from tests.support.plan_fixtures import FIXED_FACTS, session_store

STRANGER = 65534


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = session_store(tmp_path, monkeypatch)

    def rebuilt(*_: object, **__: object) -> None:
        raise BuildStarted  # the stored image was not used: the session builds it again

    monkeypatch.setattr("envbuild.builder.execute.executor.BuildExecutor.execute", rebuilt)
    return root


def stored_base(tmp_path: Path, store: Path, packages: list[str]) -> tuple[LoadedSpec, Path, Layers]:
    """A complete base (a small rootfs, its tree digest and record), as a build leaves it, for a spec that
    installs `packages`. Returns (spec, output, the build's layers)."""
    loaded = write_spec(tmp_path, packages)
    output = tmp_path / "out" / "tiny.sif"
    output.parent.mkdir(exist_ok=True)
    request = make_request(loaded, BuildOptions(output=output), replace(FIXED_FACTS, cache_dir=store), lock=None)
    base = plan_base(request)
    (Path(base.rootfs) / "etc").mkdir(parents=True)
    (Path(base.rootfs) / "etc" / "os-release").write_text("ID=debian\n")
    digest = tree_digest(base.rootfs)
    Path(base.digest_file).write_text(digest + "\n")
    write_content_record(base.entry, trees={"rootfs": digest})
    Path(base.entry, "complete").write_text("debootstrap:bookworm\n")
    return loaded, output, plan_layers(request.with_base_digest(digest))


def stored_build(tmp_path: Path, store: Path) -> tuple[LoadedSpec, Path, Path]:
    """The base (stored_base) and the image entry the spec's build makes from it (a real SIF with its content
    record), as a build leaves them. Returns (spec, output, stored image)."""
    loaded, output, layers = stored_base(tmp_path, store, ["six"])
    entry = StorePaths(str(store)).image(layers.image_entry)
    os.makedirs(entry.dir)
    write_sif(tmp_path / "tree", Path(entry.image), {"layers": {"image": layers.image_key}})
    write_content_record(entry.dir, files=("image.sif",))
    Path(entry.complete).write_text("tiny\n")
    return loaded, output, Path(entry.image)


def share_with_group(store: Path) -> None:
    """The store as a project's group shares it: setgid, group-writable directories (not the trees inside
    entries)."""
    for directory in (store, *store.glob("*"), *store.glob("*/*")):
        if directory.is_dir():
            share(directory)


def build(loaded: LoadedSpec, output: Path, store: Path) -> str:
    out = io.StringIO()
    BuildSession(loaded, BuildOptions(output=output, cache_dir=store), out=out).build()
    return out.getvalue()


def same_size_tamper(image: Path) -> None:
    data = bytearray(image.read_bytes())
    data[-1] ^= 0xFF  # one byte of the squashfs: the size, and so the cheap check, stays the same
    image.write_bytes(bytes(data))


def test_an_untampered_image_from_a_group_writable_store_is_copied_out(tmp_path: Path, store: Path) -> None:
    loaded, output, stored = stored_build(tmp_path, store)
    share_with_group(store)
    text = build(loaded, output, store)
    assert f"image unchanged, taken from the store: {output}" in text
    assert output.read_bytes() == stored.read_bytes()
    assert "warning" not in text


def test_a_tampered_image_in_a_group_writable_store_is_not_copied_out(tmp_path: Path, store: Path) -> None:
    loaded, output, stored = stored_build(tmp_path, store)
    share_with_group(store)
    same_size_tamper(stored)
    out = io.StringIO()
    with pytest.raises(BuildStarted):
        BuildSession(loaded, BuildOptions(output=output, cache_dir=store), out=out).build()
    text = out.getvalue()
    assert f"warning: image entry {stored.parent.name} in the store {store} does not match its content record: " \
           f"image.sif has sha256:" in text
    assert f"{store} is writable by its group" in text and "not used, building it again" in text
    assert not output.exists()
    assert [p.name for p in output.parent.iterdir()] == ["tiny.sif.build.log"], "no copy of it is left beside the output"
    assert not (stored.parent / "complete").exists(), "withdrawn, so the build makes it again"


def test_an_entry_owned_by_a_stranger_is_checked_in_full(tmp_path: Path, store: Path) -> None:
    """Two users: the image entry was made by another user (uid 65534) in a store this user reuses, with
    nothing group-writable. Tests run as root in CI; as another user this chown is not allowed."""
    if os.geteuid() != 0:
        pytest.skip("chown to a stranger needs root")
    loaded, output, stored = stored_build(tmp_path, store)
    for path in (stored.parent, *stored.parent.iterdir()):
        os.lchown(path, STRANGER, STRANGER)
    same_size_tamper(stored)
    out = io.StringIO()
    with pytest.raises(BuildStarted):
        BuildSession(loaded, BuildOptions(output=output, cache_dir=store), out=out).build()
    assert f"belongs to user nobody (uid {STRANGER})" in out.getvalue()
    assert not output.exists()


def test_the_users_own_store_compares_sizes_only(tmp_path: Path, store: Path) -> None:
    """Write access is trust: only the user could have changed their own store, so its entries are not
    hashed on reuse; a size that differs from the record (a truncated copy) is still caught."""
    loaded, output, stored = stored_build(tmp_path, store)
    same_size_tamper(stored)
    assert "image unchanged, taken from the store" in build(loaded, output, store)
    output.unlink()
    stored.write_bytes(stored.read_bytes()[:-1])
    out = io.StringIO()
    with pytest.raises(BuildStarted):
        BuildSession(loaded, BuildOptions(output=output, cache_dir=store), out=out).build()
    assert "image.sif is" in out.getvalue() and "bytes, its record says" in out.getvalue()
    assert not output.exists()


def test_an_entry_without_a_record_is_recorded_in_the_users_store_and_rebuilt_in_a_shared_one(
        tmp_path: Path, store: Path) -> None:
    loaded, output, stored = stored_build(tmp_path, store)
    record = stored.parent / "content.json"
    record.unlink()  # made by an older envbuild
    assert "image unchanged, taken from the store" in build(loaded, output, store)
    assert record.is_file()
    output.unlink()
    record.unlink()
    share_with_group(store)
    out = io.StringIO()
    with pytest.raises(BuildStarted):
        BuildSession(loaded, BuildOptions(output=output, cache_dir=store), out=out).build()
    assert "it has no content record (made by an older envbuild), so it cannot be verified" in out.getvalue()
    assert not output.exists()


@pytest.mark.parametrize("tamper", ["digest-file", "rootfs"])
def test_a_tampered_base_in_a_group_writable_store_is_refused(tmp_path: Path, store: Path, tamper: str) -> None:
    """The base digest is recomputed from the base, not read: a digest file pointing the layer keys at another
    entry, or a root file system changed under its digest, stops the build before anything is copied."""
    loaded, output, _stored = stored_build(tmp_path, store)
    base = next(store.glob("bases/*"))
    if tamper == "digest-file":
        (base / "digest").write_text("sha256:" + "0" * 64 + "\n")
    else:
        (base / "rootfs" / "etc" / "ld.so.preload").write_text("/tmp/evil.so\n")
    share_with_group(store)
    with pytest.raises(EnvbuildError) as caught:
        build(loaded, output, store)
    message = caught.value.render()
    assert f"the base entry {base.name} in the store {store} does not match its record" in message
    assert f"envbuild cache rm --cache-dir {store} base/{base.name}" in message
    assert not output.exists()


def test_an_overlays_base_digest_is_recomputed_from_the_sif_in_a_shared_store(tmp_path: Path) -> None:
    """overlays/base-*/digest records a base .sif's sha256 (the overlay's key is made from it)."""
    from envbuild.builder.sessions.storetrust import trusted_file_digest
    from envbuild.shared.treedigest import file_digest

    store = tmp_path / "store"
    entry = kind_dir(store, "overlay") / "base-x"
    entry.mkdir(parents=True)
    base_sif = tmp_path / "base.sif"
    base_sif.write_bytes(b"SIF" * 100)
    forged = "sha256:" + "0" * 64
    assert trusted_file_digest(store, str(entry), str(base_sif), forged) == forged  # the user's own store
    share_with_group(store)
    assert trusted_file_digest(store, str(entry), str(base_sif), file_digest(str(base_sif))) == file_digest(str(base_sif))
    with pytest.raises(EnvbuildError, match=f"records {forged} for {base_sif}, which has sha256:"):
        trusted_file_digest(store, str(entry), str(base_sif), forged)


def test_a_full_disk_while_copying_from_a_shared_store_is_said_and_leaves_nothing(
        tmp_path: Path, store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    from envbuild.builder.execute.diskspace import DiskFull
    from envbuild.shared import safefiles

    loaded, output, _stored = stored_build(tmp_path, store)
    share_with_group(store)

    def full(source: int, out: int, size: int) -> None:
        os.write(out, b"half")
        raise OSError(errno.ENOSPC, "No space left on device")

    # The copy to the output's partial goes through safefiles (an unpredictable name, never a link): full halfway.
    monkeypatch.setattr(safefiles, "_copy_data", full)
    with pytest.raises(DiskFull, match=r"step 'output' ran out of space in .*tiny\.sif\.partial-"):
        build(loaded, output, store)
    assert [p.name for p in output.parent.iterdir()] == ["tiny.sif.build.log"]


@pytest.mark.parametrize("tampered", [False, True])
def test_layered_builds_layer_only_over_an_image_that_matches_its_record(tmp_path: Path, store: Path,
                                                                         monkeypatch: pytest.MonkeyPatch, tampered: bool) -> None:
    """--layered: the stored image the new one is layered over ends up in the output; from a shared store it is
    hashed first and, not matching, passed over (the whole tree is squashed)."""
    from envbuild.builder.plan.planrender import render_build_plan

    loaded, output, parent = stored_build(tmp_path, store)
    share_with_group(store)
    if tampered:
        same_size_tamper(parent)
    monkeypatch.setattr("envbuild.builder.sessions.squashparent.find_squash_parent", lambda *_, **__: parent.parent.name)
    options = BuildOptions(output=output, cache_dir=store, layered=True)
    digest = Path(next(store.glob("bases/*/digest"))).read_text().strip()
    request = make_request(loaded, options, replace(FIXED_FACTS, cache_dir=store), lock=None).with_base_digest(digest)
    said: list[str] = []
    plan = BuildSession(loaded, options, out=io.StringIO())._plan(request, plan_layers(request), use=lambda *_: None,
                                                                   say=said.append)
    layered_over = f"as a layer over image {parent.parent.name}" in render_build_plan(plan)
    assert layered_over is not tampered
    assert any("does not match its content record" in line and "squashing the whole tree" in line
               for line in said) is tampered
