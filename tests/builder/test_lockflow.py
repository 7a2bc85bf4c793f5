"""One `envbuild build --dry-run` reads SPEC.lock once: the lock is opened and parsed once per command,
decided once (envbuild.builder.sessions.lockdecision), and what was read is passed down to the request and the
session, for each spec kind. Opens are counted with an audit hook ("open" events: every file open,
whatever function makes it), parses by wrapping the lock file reader."""

from __future__ import annotations

import contextlib
import io
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import envbuild.lock.fileformat
from envbuild.builder.sessions.buildrequest import BuildOptions
from envbuild.builder.sessions.lockdecision import torch_index_for
from envbuild.commands.build import run_build
from envbuild.envspec.loadspec import LoadedSpec, load_spec
from envbuild.host.arch import host_arch
from envbuild.lock.fileformat import render_lock
from envbuild.lock.lockmodel import Lock, LockedPackage, LockTarget, lock_inputs
from tests.support.inventory_layout import fixture_image

_OPENED: list[list[str]] = []  # the paths opened while a count() is active


def _on_audit(event: str, args: tuple[object, ...]) -> None:
    if event == "open" and _OPENED and isinstance(args[0], (str, Path)):
        _OPENED[-1].append(str(args[0]))


sys.addaudithook(_on_audit)  # hooks cannot be removed: it records only inside count()


@contextlib.contextmanager
def count(lock_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, int]]:
    """How often `lock_path` is opened and a lock text parsed inside the block."""
    counts = {"opens": 0, "parses": 0}
    parse = envbuild.lock.fileformat.read_lock

    def counted(text: str, source: str) -> Lock:
        counts["parses"] += 1
        return parse(text, source)

    monkeypatch.setattr(envbuild.lock.fileformat, "read_lock", counted)
    _OPENED.append([])
    try:
        yield counts
    finally:
        opened = _OPENED.pop()
        counts["opens"] = sum(Path(path).absolute() == lock_path.absolute() for path in opened)


def write_locked_spec(directory: Path, text: str) -> tuple[LoadedSpec, Path]:
    """The spec and a current lock of its one package, for this machine's architecture."""
    spec = directory / "tiny.yaml"
    spec.write_text(text)
    loaded = load_spec(spec)
    lock = Lock(inputs=lock_inputs(loaded.spec, torch_index_for(loaded)),
                target=LockTarget(python="3.11.2", platform=f"{host_arch()}-manylinux_2_36"),
                base_digest="sha256:" + "0" * 64, recipe_digest="sha256:" + "0" * 64, resolver="uv 0.13.9",
                packages=(LockedPackage("six", "1.17.0", ("sha256:" + "a" * 64,)),), spec_name="tiny")
    path = directory / "tiny.lock"
    path.write_text(render_lock(lock, spec_path_for_comment=str(spec)))
    return loaded, path


IMAGE_SPEC = "name: tiny\nsystem: local\nbase: debootstrap:bookworm\npython:\n  packages: [six]\n"
OVERLAY_SPEC = "name: tiny\nsystem: local\nbase: localimage:{base}\noverlay: {{}}\npython:\n  packages: [six]\n"


@pytest.mark.parametrize("kind", ["image", "overlay"])
@pytest.mark.parametrize("flags", [{}, {"locked": True}, {"frozen": True}])
def test_a_dry_run_opens_and_parses_the_lock_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str,
                                                  flags: dict[str, bool]) -> None:
    text = IMAGE_SPEC if kind == "image" else OVERLAY_SPEC.format(base=fixture_image("gzip"))
    loaded, lock_path = write_locked_spec(tmp_path, text)
    options = BuildOptions(output=tmp_path / "tiny.out", cache_dir=tmp_path / "store", **flags)
    with count(lock_path, monkeypatch) as counts:
        plan = run_build(loaded, options, io.StringIO(), dry_run=True)
    assert plan is not None and plan.startswith(f"# lock: {'--frozen: installing' if flags.get('frozen') else 'using'} {lock_path}")
    assert counts == {"opens": 1, "parses": 1}


def test_a_stale_lock_is_read_once_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _, lock_path = write_locked_spec(tmp_path, IMAGE_SPEC)
    (tmp_path / "tiny.yaml").write_text(IMAGE_SPEC.replace("[six]", "[six, idna]"))
    loaded = load_spec(tmp_path / "tiny.yaml")
    with count(lock_path, monkeypatch) as counts:
        plan = run_build(loaded, BuildOptions(output=tmp_path / "tiny.sif", cache_dir=tmp_path / "store"), io.StringIO(),
                         dry_run=True)
    assert plan is not None and "is stale (requirement added: idna)" in plan.splitlines()[0]
    assert counts == {"opens": 1, "parses": 1}


def test_a_conda_dry_run_reads_no_lock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """conda resolves the env itself when cotainr builds it: a lock file next to the spec is not read."""
    spec = tmp_path / "tiny.yaml"
    spec.write_text("name: tiny\nsystem: local\nbase: docker://ubuntu:22.04\nconda:\n  dependencies: [python=3.12]\n")
    (tmp_path / "tiny.lock").write_text("not read\n")
    with count(tmp_path / "tiny.lock", monkeypatch) as counts:
        plan = run_build(load_spec(spec), BuildOptions(output=tmp_path / "tiny.sif", cache_dir=tmp_path / "store"),
                         io.StringIO(), dry_run=True)
    assert plan is not None and counts == {"opens": 0, "parses": 0}


@pytest.fixture
def resolved(monkeypatch: pytest.MonkeyPatch) -> None:
    """The resolution (uv on the host) replaced by a lock of the spec's packages."""
    import envbuild.builder.sessions.imagelock

    def fake(loaded: LoadedSpec, previous: Lock | None, **_: object) -> Lock:
        assert previous is not None, "the old lock's pins are kept, from the one reading"
        names = [r.split("=")[0] for r in loaded.spec.python.requirements()]
        return Lock(inputs=lock_inputs(loaded.spec, None), target=previous.target, base_digest=previous.base_digest,
                    recipe_digest=previous.recipe_digest, resolver="uv 0.13.9", spec_name="tiny",
                    packages=tuple(LockedPackage(name, "1.0", ("sha256:" + "b" * 64,)) for name in names))

    monkeypatch.setattr(envbuild.builder.sessions.imagelock, "resolve_lock", fake)


def test_a_build_reads_its_stale_lock_once_to_resolve_and_rewrite_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                     resolved: None) -> None:
    """Read once: decided stale, its pins kept, the copy of its env layer started, its text compared with."""
    from envbuild.builder.sessions.buildlock import lock_for_build

    _, lock_path = write_locked_spec(tmp_path, IMAGE_SPEC)
    stale_text = lock_path.read_text()
    (tmp_path / "tiny.yaml").write_text(IMAGE_SPEC.replace("[six]", "[six, idna]"))
    loaded = load_spec(tmp_path / "tiny.yaml")
    given: list[str] = []
    with count(lock_path, monkeypatch) as counts:
        lock = lock_for_build(loaded, BuildOptions(output=tmp_path / "tiny.sif"), io.StringIO(), overlay=False,
                              while_resolving=lambda stale: given.append(stale.text))
    assert counts == {"opens": 1, "parses": 1}
    assert given == [stale_text], "the stale lock, as read, for the copy of its env layer made meanwhile"
    assert lock is not None and lock.text == lock_path.read_text() and "idna" in lock.text


def test_envbuild_lock_reads_the_old_lock_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, resolved: None) -> None:
    from envbuild.commands.lock import run_lock

    loaded, lock_path = write_locked_spec(tmp_path, IMAGE_SPEC)
    out = io.StringIO()
    with count(lock_path, monkeypatch) as counts:
        assert run_lock(loaded, upgrade=False, upgrade_packages=(), cache_dir=None, verbose=False, out=out) == lock_path
    assert counts == {"opens": 1, "parses": 1}
    assert "  ~ six 1.17.0 -> 1.0" in out.getvalue() and "1.0" in lock_path.read_text()
