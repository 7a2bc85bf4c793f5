"""The full path's up-to-date verdict, recorded for the light check (envbuild.commands.uptodate): an image session
that finds its output up to date names the inputs it decided from; recorded, the same command is answered
without the session, and a change to any of those inputs (the spec, the lock, the recipe, pip's configuration,
the store's base, the output) sends the next command to the full path again, which builds where the output is
really stale. The store and host facts are the session tests' (tests/builder/test_buildsession.py)."""

from __future__ import annotations

import io
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import cast

import pytest

from envbuild.builder.plan.layers import plan_layers
from envbuild.builder.sessions.buildrequest import BuildOptions
from envbuild.builder.sessions.imagesession import BuildSession
from envbuild.commands import uptodate
from envbuild.commands.build import _remember_if_up_to_date, _Said
from tests.builder.test_buildsession import BuildStarted, complete_base, request_for, stop_at_build, write_sif, write_spec
from tests.conftest import REPO
from tests.support.plan_fixtures import session_store

ARGV = ["build", "tiny.yaml", "-o", "out/tiny.sif"]


@pytest.fixture(autouse=True)
def _no_key_left() -> Iterator[None]:
    """The command key the light check keeps for the full path: not left for the next test's CliRunner build."""
    yield
    uptodate._pending.clear()


@pytest.fixture
def setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """An up-to-date output (tmp/out/tiny.sif) over a complete base, with the recipes, HOME and the user's
    cache in tmp_path; returns (spec directory, output)."""
    shutil.copytree(REPO / "recipes", tmp_path / "recipes")
    monkeypatch.setenv("ENVBUILD_RECIPES", str(tmp_path / "recipes"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    store = session_store(tmp_path, monkeypatch)
    stop_at_build(monkeypatch)
    loaded = write_spec(tmp_path, ["six"])
    output = tmp_path / "out" / "tiny.sif"
    output.parent.mkdir()
    request = request_for(loaded, store, output)
    complete_base(request)
    write_sif(tmp_path / "tree", output, {"layers": {"image": plan_layers(request).image_key}})
    return tmp_path, output


def full_path(directory: Path, output: Path) -> str:
    """What bin/envbuild does on a miss: the light check first, then the session, whose verdict is recorded."""
    from envbuild.envspec.loadspec import load_spec

    assert not uptodate.answer_if_up_to_date(ARGV, io.StringIO()), "answered by the light check"
    said = _Said(io.StringIO())
    session = BuildSession(load_spec(directory / "tiny.yaml", check_host=False),
                           BuildOptions(output=output, cache_dir=directory / "store"), out=cast("io.StringIO", said))
    try:
        session.build()
    except BuildStarted:
        return "".join(said.text) + "<build started>"
    _remember_if_up_to_date(session, said)
    return "".join(said.text)


def light(argv: list[str] = ARGV) -> str | None:
    out = io.StringIO()
    return out.getvalue() if uptodate.answer_if_up_to_date(argv, out) else None


def test_a_recorded_verdict_answers_the_same_command_with_the_same_lines(setup: tuple[Path, Path]) -> None:
    directory, output = setup
    printed = full_path(directory, output)
    assert f"{output} is up to date (image tiny-" in printed
    answer = light()
    assert answer is not None
    assert answer.rpartition(" (")[0] == printed.rpartition(" (")[0]  # all but the time it took


def _base_digest(directory: Path) -> Path:
    return next((directory / "store").rglob("digest"))


# Each: a change to one input, and whether the full path then finds the output stale (it builds); None: the
# light check's miss only is asserted.
CHANGES: dict[str, tuple[Callable[[Path, Path], object], bool | None]] = {
    "spec": (lambda d, o: write_spec(d, ["six", "idna"]), True),
    "spec, same meaning": (lambda d, o: (d / "tiny.yaml").write_text((d / "tiny.yaml").read_text() + "# note\n"), True),
    "lock appears": (lambda d, o: (d / "tiny.lock").write_text("version: 1\n"), False),
    "recipe": (lambda d, o: (d / "recipes" / "local.yaml").write_text(
        (d / "recipes" / "local.yaml").read_text() + "\n# edited\n"), True),
    "recipe added": (lambda d, o: (d / "recipes" / "mysite.yaml").write_text("name: mysite\n"), False),
    # The session tests' fixed host facts do not read it; the light check must.
    "pip configuration appears": (lambda d, o: ((d / "home" / ".config" / "pip").mkdir(parents=True),
                                                (d / "home" / ".config" / "pip" / "pip.conf").write_text(
                                                    "[global]\nindex-url = https://example.org/simple\n")), None),
    "store's base digest": (lambda d, o: _base_digest(d).write_text("sha256:" + "e" * 64 + "\n"), True),
    "store's base incomplete": (lambda d, o: (_base_digest(d).parent / "complete").unlink(), True),
    "output rewritten": (lambda d, o: o.write_bytes(o.read_bytes()), False),
    "output removed": (lambda d, o: o.unlink(), True),
    # The full path refuses an output directory it cannot write (root can write it still).
    "output's directory read-only": (lambda d, o: o.parent.chmod(0o555), None),
}


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_any_input_changed_goes_to_the_full_path(setup: tuple[Path, Path], change: str) -> None:
    directory, output = setup
    full_path(directory, output)
    assert light() is not None
    mutate, stale = CHANGES[change]
    mutate(directory, output)
    if stale is None:
        assert light() is None
        return
    printed = full_path(directory, output)  # asserts the light check did not answer
    assert printed.endswith("<build started>") == stale, printed


def test_an_output_in_the_working_directory_records_the_project_file(setup: tuple[Path, Path]) -> None:
    """Its ./envrun.yaml is updated by the full path: a verdict followed by that update is not recorded, and
    the record of the next one names the file, so an edit of it goes to the full path."""
    directory, output = setup
    here = output.parent
    argv = ["build", "../tiny.yaml", "-o", "tiny.sif"]
    os.chdir(here)  # the fixture's monkeypatch.chdir goes back
    assert not uptodate.answer_if_up_to_date(argv, io.StringIO())
    from envbuild.envspec.loadspec import load_spec

    def session_run() -> str:
        said = _Said(io.StringIO())
        session = BuildSession(load_spec(directory / "tiny.yaml", check_host=False),
                               BuildOptions(output=output, cache_dir=directory / "store"), out=cast("io.StringIO", said))
        session.build()
        _remember_if_up_to_date(session, said)
        return "".join(said.text)

    assert "wrote" in session_run().splitlines()[-1]  # envrun.yaml written after the verdict: not recorded
    assert light(argv) is None
    session_run()
    assert light(argv) is not None
    (here / "envrun.yaml").write_text((here / "envrun.yaml").read_text() + "# mine\n")
    assert light(argv) is None


def test_a_verdict_after_the_lock_was_rewritten_is_not_recorded(setup: tuple[Path, Path]) -> None:
    """A stale lock resolved again and written before the verdict: that command printed the resolution, the next
    one will not, so its lines are no answer for the next one."""
    directory, output = setup
    lock = directory / "tiny.lock"
    assert not uptodate.answer_if_up_to_date(ARGV, io.StringIO())
    uptodate.note_lock_before(str(lock))
    lock.write_text("version: 1\n")  # as envbuild.builder.sessions.buildlock writes a resolved lock
    from envbuild.envspec.loadspec import load_spec

    said = _Said(io.StringIO())
    session = BuildSession(load_spec(directory / "tiny.yaml", check_host=False),
                           BuildOptions(output=output, cache_dir=directory / "store"), out=cast("io.StringIO", said))
    session.build()
    assert session.up_to_date is not None
    _remember_if_up_to_date(session, said)
    assert light() is None
    full_path(directory, output)  # the next command, with the lock as it is now: recorded
    assert light() is not None
