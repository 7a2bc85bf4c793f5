"""Which lock a build installs, carried out on real lock files (the resolution itself is replaced by a
fixed result: tests/integration/test_build_progress.py resolves for real): a current lock is used, a
stale one resolved again and rewritten, --frozen takes it unchecked, a read-only directory does not fail
the build, and a dry run writes nothing."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

import envbuild.builder.sessions.imagelock
import envbuild.shared.safefiles
from envbuild.builder.sessions.buildlock import dry_run_lock, lock_for_build
from envbuild.builder.sessions.buildrequest import BuildOptions, torch_index_for
from envbuild.envspec.loadspec import LoadedSpec, load_spec
from envbuild.lock.fileformat import render_lock
from envbuild.lock.lockmodel import Lock, LockedPackage, LockTarget, lock_inputs

SPEC = """\
name: tiny
system: local
base: debootstrap:bookworm
python:
  packages: [{packages}]
"""


def spec_with(directory: Path, packages: str) -> LoadedSpec:
    path = directory / "tiny.yaml"
    path.write_text(SPEC.format(packages=packages))
    return load_spec(path)


def lock_for(loaded: LoadedSpec, *names: str) -> Lock:
    return Lock(inputs=lock_inputs(loaded.spec, torch_index_for(loaded)),
                target=LockTarget(python="3.11.2", platform="x86_64-manylinux_2_36"),
                base_digest="sha256:" + "0" * 64, recipe_digest="sha256:" + "0" * 64, resolver="uv 0.13.9",
                packages=tuple(LockedPackage(name, "1.0", ("sha256:" + "a" * 64,)) for name in names), spec_name="tiny")


def write_lock_file(loaded: LoadedSpec, lock: Lock) -> Path:
    path = loaded.path.with_suffix(".lock")
    path.write_text(render_lock(lock, spec_path_for_comment=str(loaded.path)))
    return path


@pytest.fixture
def resolved(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, object]]:
    """The resolution, replaced: records its arguments and returns a lock of the spec's packages."""
    calls: list[dict[str, object]] = []

    def fake(loaded: LoadedSpec, previous: Lock | None, **kwargs: object) -> Lock:
        calls.append({"previous": previous, **kwargs})
        return lock_for(loaded, *(r.split("=")[0] for r in loaded.spec.python.requirements()))

    monkeypatch.setattr(envbuild.builder.sessions.imagelock, "resolve_lock", fake)
    return calls


def options(tmp_path: Path, **flags: bool) -> BuildOptions:
    return BuildOptions(output=tmp_path / "tiny.sif", **flags)


def test_a_current_lock_is_installed_without_resolving(tmp_path: Path, resolved: list[dict[str, object]]) -> None:
    loaded = spec_with(tmp_path, "six")
    path = write_lock_file(loaded, lock_for(loaded, "six"))
    out = io.StringIO()
    lock = lock_for_build(loaded, options(tmp_path), out, overlay=False)
    assert lock is not None and lock[2] == path and lock[0].packages[0].name == "six"
    assert out.getvalue() == f"using {path} (1 packages)\n"
    assert resolved == []


def test_a_stale_lock_is_resolved_again_from_its_pins_and_rewritten(tmp_path: Path, resolved: list[dict[str, object]]) -> None:
    loaded = spec_with(tmp_path, "six")
    path = write_lock_file(loaded, lock_for(loaded, "six"))
    loaded = spec_with(tmp_path, "six, idna")
    out = io.StringIO()
    lock = lock_for_build(loaded, options(tmp_path), out, overlay=False)
    assert lock is not None and sorted(p.name for p in lock[0].packages) == ["idna", "six"]
    assert resolved[0]["previous"] is not None and resolved[0]["upgrade"] is False, "the other pins are kept"
    assert "is stale (requirement added: idna)" in out.getvalue() and "  + idna 1.0" in out.getvalue()
    assert "idna" in path.read_text() and lock[1] == path.read_text()


def test_frozen_takes_a_stale_lock_as_it_is(tmp_path: Path, resolved: list[dict[str, object]]) -> None:
    loaded = spec_with(tmp_path, "six")
    path = write_lock_file(loaded, lock_for(loaded, "six"))
    before = path.read_text()
    loaded = spec_with(tmp_path, "six, idna")
    lock = lock_for_build(loaded, options(tmp_path, frozen=True), io.StringIO(), overlay=False)
    assert lock is not None and lock[1] == before and resolved == []


def test_upgrade_resolves_a_current_lock_anew(tmp_path: Path, resolved: list[dict[str, object]]) -> None:
    loaded = spec_with(tmp_path, "six")
    write_lock_file(loaded, lock_for(loaded, "six"))
    lock_for_build(loaded, options(tmp_path, upgrade=True), io.StringIO(), overlay=False)
    assert resolved[0]["upgrade"] is True


def test_a_lock_that_cannot_be_written_warns_and_the_build_goes_on(tmp_path: Path, resolved: list[dict[str, object]],
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    def read_only(*_: object, **__: object) -> None:
        raise PermissionError(13, "Permission denied")

    loaded = spec_with(tmp_path, "six")
    path = write_lock_file(loaded, lock_for(loaded, "six"))
    before = path.read_text()
    loaded = spec_with(tmp_path, "six, idna")
    monkeypatch.setattr(envbuild.shared.safefiles, "atomic_write", read_only)
    out = io.StringIO()
    lock = lock_for_build(loaded, options(tmp_path, quiet=True), out, overlay=False)
    assert lock is not None and "idna" in lock[1]
    assert out.getvalue() == (f"warning: cannot write {path} (Permission denied); building from the lock resolved "
                              "now, which is kept in the image's record\n"), "-q: the warning only"
    assert path.read_text() == before


def test_without_a_lock_the_build_resolves_from_the_spec(tmp_path: Path, resolved: list[dict[str, object]]) -> None:
    loaded = spec_with(tmp_path, "six")
    out = io.StringIO()
    assert lock_for_build(loaded, options(tmp_path), out, overlay=False) is None
    assert out.getvalue().startswith(f"note: no lock file {tmp_path / 'tiny.lock'}: resolving from the spec")
    assert not (tmp_path / "tiny.lock").exists() and resolved == []


def test_a_dry_run_says_which_case_applies_and_writes_nothing(tmp_path: Path, resolved: list[dict[str, object]]) -> None:
    loaded = spec_with(tmp_path, "six")
    note, lock = dry_run_lock(loaded, options(tmp_path, upgrade=True), overlay=False)
    assert note.startswith("# lock: --upgrade: resolving every package anew") and lock is None
    assert not (tmp_path / "tiny.lock").exists() and resolved == []


def test_a_failed_resolution_releases_what_the_session_took_meanwhile(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The copy of the parent env layer started while resolving (envbuild.builder.sessions.prefetch) is removed, and its
    locks let go, when resolving fails: the build never starts, so its end would never come."""
    import envbuild.builder.sessions.buildlock
    from envbuild.commands.build import run_build
    from envbuild.shared.errors import EnvbuildError

    released: list[str] = []

    def failing(*_: object, while_resolving: object = None, **__: object) -> None:
        session = while_resolving.__self__  # type: ignore[attr-defined]
        session._uses.callback(released.append, "parent copy removed")
        raise EnvbuildError("uv could not resolve", "fix the spec")

    monkeypatch.setattr(envbuild.builder.sessions.buildlock, "lock_for_build", failing)
    loaded = spec_with(tmp_path, "six")
    with pytest.raises(EnvbuildError, match="uv could not resolve"):
        run_build(loaded, options(tmp_path), io.StringIO(), dry_run=False)
    assert released == ["parent copy removed"]
