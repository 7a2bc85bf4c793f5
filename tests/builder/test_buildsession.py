"""The build session's decisions against a temporary store, without a container runtime: when the
output is up to date (nothing runs), and which complete env layer a build starts from. The host facts
are the golden tests' fixed ones (tests/support/plan_fixtures.py) with the store moved to a temporary
directory; store entries are written as the build writes them (complete, digest, meta.json,
freeze.txt, last-used), and the output image is a real SIF (mksquashfs + envbuild.sif.writer.assemble)."""

from __future__ import annotations

import io
import json
import os
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from envbuild.builder.plan.imageplan import plan_base
from envbuild.builder.plan.layers import plan_layers
from envbuild.builder.plan.plandata import BuildRequest, Layers
from envbuild.builder.plan.sandbox import RECORD_DIR
from envbuild.builder.sessions.buildrequest import BuildOptions, make_request
from envbuild.builder.sessions.envparent import find_env_parent
from envbuild.builder.sessions.imagesession import BuildSession, image_key_of
from envbuild.envspec.loadspec import LoadedSpec, load_spec
from envbuild.sif.compression import mksquashfs_argv
from envbuild.sif.writer import assemble
from envbuild.store.layout import kind_dir
from tests.support.plan_fixtures import FIXED_FACTS, session_store

DIGEST = "sha256:" + "d" * 64
SPEC = """\
name: tiny
system: local
base: debootstrap:bookworm
python:
  packages:
{packages}
"""


class BuildStarted(Exception):
    """Raised in place of the first thing a real build runs: the session decided to build."""


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return session_store(tmp_path, monkeypatch)


def write_spec(directory: Path, packages: list[str]) -> LoadedSpec:
    path = directory / "tiny.yaml"
    path.write_text(SPEC.format(packages="".join(f"    - {p}\n" for p in packages)))
    return load_spec(path, check_host=False)


def request_for(loaded: LoadedSpec, store: Path, output: Path) -> BuildRequest:
    facts = replace(FIXED_FACTS, cache_dir=store)
    return make_request(loaded, BuildOptions(output=output), facts, lock=None).with_base_digest(DIGEST)


def complete_base(request: BuildRequest) -> None:
    """The base entry as the base step leaves it: complete, with its content digest."""
    base = plan_base(request)
    Path(base.entry).mkdir(parents=True)
    Path(base.entry, "complete").write_text("")
    Path(base.digest_file).write_text(DIGEST + "\n")


def write_sif(tree: Path, image: Path, record: dict[str, object]) -> Path:
    (tree / RECORD_DIR.lstrip("/")).mkdir(parents=True)
    (tree / RECORD_DIR.lstrip("/") / "build.json").write_text(json.dumps(record))
    subprocess.run(mksquashfs_argv(str(tree), str(image), processors=1), check=True, capture_output=True)
    assemble(str(image), deffile=b"bootstrap: scratch\n", metadata=b'{"data":{}}', arch="amd64")
    return image


def stop_at_build(monkeypatch: pytest.MonkeyPatch) -> None:
    def started(*_: object, **__: object) -> None:
        raise BuildStarted

    monkeypatch.setattr("envbuild.builder.execute.executor.BuildExecutor.execute_base", started)


# -- is the output up to date? -------------------------------------------------------------------


def test_image_key_of_reads_the_record_of_a_sif(tmp_path: Path) -> None:
    image = write_sif(tmp_path / "tree", tmp_path / "img.sif", {"layers": {"image": "k" * 64}})
    assert image_key_of(image) == "k" * 64


def test_image_key_of_is_none_for_what_is_no_envbuild_image(tmp_path: Path) -> None:
    assert image_key_of(tmp_path / "absent.sif") is None
    (tmp_path / "text.sif").write_text("not an image\n")
    assert image_key_of(tmp_path / "text.sif") is None
    assert image_key_of(write_sif(tmp_path / "t1", tmp_path / "norecordkey.sif", {"spec": {}})) is None
    (tmp_path / "dir.sif").mkdir()
    assert image_key_of(tmp_path / "dir.sif") is None


def test_output_with_the_same_image_key_is_up_to_date(tmp_path: Path, store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    loaded = write_spec(tmp_path, ["six"])
    output = tmp_path / "out" / "tiny.sif"
    output.parent.mkdir()
    request = request_for(loaded, store, output)
    complete_base(request)
    write_sif(tmp_path / "tree", output, {"layers": {"image": plan_layers(request).image_key}})
    before = output.stat().st_mtime_ns
    stop_at_build(monkeypatch)
    out = io.StringIO()
    assert BuildSession(loaded, BuildOptions(output=output, cache_dir=store), out=out).build() == output
    assert f"{output} is up to date (image tiny-" in out.getvalue()
    assert output.stat().st_mtime_ns == before
    assert not output.with_name("tiny.sif.build.log").exists(), "an up-to-date output starts no build log"


@pytest.mark.parametrize(("output_form", "asked", "up_to_date"), [
    ("whole", None, True),       # a default build takes the image --full made of the same inputs
    ("layered", None, True),     # and its own (layered where a stored image fitted)
    ("whole", False, True),      # --full, its own
    ("layered", False, False),   # --full never takes a layered image: fewer runtimes read one
    ("whole", True, False),      # --layered asked for a layered image
])
def test_which_image_form_each_build_takes_as_up_to_date(tmp_path: Path, store: Path, monkeypatch: pytest.MonkeyPatch,
                                                         output_form: str, asked: bool | None, up_to_date: bool) -> None:
    loaded = write_spec(tmp_path, ["six"])
    output = tmp_path / "out" / "tiny.sif"
    output.parent.mkdir()
    request = request_for(loaded, store, output)
    complete_base(request)
    form = replace(request, options=replace(request.options, layered=output_form == "layered"))
    write_sif(tmp_path / "tree", output, {"layers": {"image": plan_layers(form).image_key}})
    stop_at_build(monkeypatch)
    out = io.StringIO()
    session = BuildSession(loaded, BuildOptions(output=output, cache_dir=store, layered=asked), out=out)
    if up_to_date:
        assert session.build() == output
        assert f"{output} is up to date (image tiny-" in out.getvalue()
    else:
        with pytest.raises(BuildStarted):
            session.build()
        assert "is up to date" not in out.getvalue()


@pytest.mark.parametrize("change", ["packages", "key", "base-incomplete"])
def test_output_is_rebuilt_when_anything_differs(tmp_path: Path, store: Path, monkeypatch: pytest.MonkeyPatch,
                                                 change: str) -> None:
    """The same setup as the up-to-date case with one thing changed: the spec's packages, the key the
    output records, or the base entry not being complete (its digest is not trusted then)."""
    loaded = write_spec(tmp_path, ["six"])
    output = tmp_path / "out" / "tiny.sif"
    output.parent.mkdir()
    request = request_for(loaded, store, output)
    complete_base(request)
    key = plan_layers(request).image_key
    write_sif(tmp_path / "tree", output, {"layers": {"image": "0" * 64 if change == "key" else key}})
    if change == "packages":
        loaded = write_spec(tmp_path, ["six", "idna"])
    if change == "base-incomplete":
        Path(plan_base(request).entry, "complete").unlink()
    stop_at_build(monkeypatch)
    out = io.StringIO()
    with pytest.raises(BuildStarted):
        BuildSession(loaded, BuildOptions(output=output, cache_dir=store), out=out).build()
    assert "is up to date" not in out.getvalue()
    assert f"building tiny -> {output}" in out.getvalue()


# -- which env layer does a build start from? ----------------------------------------------------


def add_env(store: Path, name: str, *, compat: str, requirements: list[str], freeze: list[str],
            last_used: float | None = 1_000_000.0, complete: bool = True, meta: str | None = None) -> Path:
    entry = kind_dir(store, "env") / name
    entry.mkdir(parents=True)
    (entry / "meta.json").write_text(meta if meta is not None else json.dumps(
        {"kind": "env", "compat": compat, "requirements": requirements, "locked": False}))
    (entry / "freeze.txt").write_text("".join(line + "\n" for line in freeze))
    if complete:
        (entry / "complete").write_text("tiny\n")
    if last_used is not None:
        (entry / "last-used").write_text("")
        os.utime(entry / "last-used", (last_used, last_used))
    return entry


def layers_for(tmp_path: Path, store: Path, packages: list[str]) -> tuple[Layers, BuildRequest]:
    request = request_for(write_spec(tmp_path, packages), store, tmp_path / "tiny.sif")
    return plan_layers(request), request


def test_no_env_layers_no_parent(tmp_path: Path, store: Path) -> None:
    layers, request = layers_for(tmp_path, store, ["six", "idna"])
    assert find_env_parent(store, layers, request) is None
    kind_dir(store, "env").mkdir()
    assert find_env_parent(store, layers, request) is None


def test_parent_is_a_complete_compatible_subset_with_the_most_packages(tmp_path: Path, store: Path) -> None:
    layers, request = layers_for(tmp_path, store, ["six", "idna"])
    compat = layers.env_compat
    add_env(store, "small", compat=compat, requirements=["six"], freeze=["pip==24.0", "six==1.17.0"])
    assert find_env_parent(store, layers, request) == "small"
    add_env(store, "big", compat=compat, requirements=["six", "idna"], freeze=["six==1.17.0", "idna==3.10"])
    assert find_env_parent(store, layers, request) == "big"


@pytest.mark.parametrize("problem", ["incomplete", "other-compat", "unwanted-package", "broken-meta", "no-freeze"])
def test_unusable_env_layers_are_passed_over(tmp_path: Path, store: Path, problem: str) -> None:
    """A usable 'small' layer and a bigger one that would win but for one problem: 'small' is chosen."""
    layers, request = layers_for(tmp_path, store, ["six", "idna"])
    compat = layers.env_compat
    add_env(store, "small", compat=compat, requirements=["six"], freeze=["six==1.17.0"])
    big = add_env(store, "big", compat="other" if problem == "other-compat" else compat,
                  requirements=["six", "idna", "rich"] if problem == "unwanted-package" else ["six", "idna"],
                  freeze=["six==1.17.0", "idna==3.10", "rich==13.7.1"], complete=problem != "incomplete",
                  meta="{not json" if problem == "broken-meta" else None)
    if problem == "no-freeze":
        (big / "freeze.txt").unlink()
    assert find_env_parent(store, layers, request) == "small"


def test_between_equal_layers_the_most_recently_used_wins(tmp_path: Path, store: Path) -> None:
    layers, request = layers_for(tmp_path, store, ["six", "idna"])
    compat = layers.env_compat
    add_env(store, "older", compat=compat, requirements=["six"], freeze=["six==1.17.0"], last_used=1_000_000.0)
    add_env(store, "newer", compat=compat, requirements=["six"], freeze=["six==1.17.0"], last_used=2_000_000.0)
    assert find_env_parent(store, layers, request) == "newer"
    # No last-used file: the time the layer was completed counts.
    os.utime(add_env(store, "fresh", compat=compat, requirements=["six"], freeze=["six==1.17.0"],
                     last_used=None) / "complete", (3_000_000.0, 3_000_000.0))
    assert find_env_parent(store, layers, request) == "fresh"


def test_locked_build_needs_every_package_at_the_locked_version(tmp_path: Path, store: Path) -> None:
    _, request = layers_for(tmp_path, store, ["six", "idna"])
    locked = replace(request, lock=replace(request.lock, requirements=f"six==1.17.0 --hash={'sha256:' + 'a' * 64}\n"
                                                                      f"idna==3.10 --hash={'sha256:' + 'b' * 64}\n"))
    compat = plan_layers(locked).env_compat
    add_env(store, "older-six", compat=compat, requirements=["six", "idna"], freeze=["six==1.16.0", "idna==3.10"])
    assert find_env_parent(store, plan_layers(locked), locked) is None
    add_env(store, "same-six", compat=compat, requirements=["six"], freeze=["pip==24.0", "six==1.17.0"])
    assert find_env_parent(store, plan_layers(locked), locked) == "same-six"


def test_session_plans_the_env_step_on_the_chosen_parent(tmp_path: Path, store: Path) -> None:
    layers, request = layers_for(tmp_path, store, ["six", "idna"])
    add_env(store, "tiny-parent", compat=layers.env_compat, requirements=["six"], freeze=["six==1.17.0"])
    out = io.StringIO()
    session = BuildSession(write_spec(tmp_path, ["six", "idna"]), BuildOptions(output=tmp_path / "tiny.sif"), out=out)
    plan = session._plan(request, layers, use=session._use, say=session._say)
    env = next(step for step in plan.steps if step.name == "env")
    assert "install the difference on top of env layer tiny-parent" in env.title
    assert "reusing env layer tiny-parent: installing only the difference" in out.getvalue()
    # The layer itself already complete: no parent is looked for.
    complete = kind_dir(store, "env") / layers.env_entry
    complete.mkdir(parents=True)
    (complete / "complete").write_text("")
    again = session._plan(request, layers, use=session._use, say=session._say)
    assert "install the difference" not in next(step for step in again.steps if step.name == "env").title


def test_a_dry_run_plans_on_the_parents_the_store_holds_and_holds_nothing(tmp_path: Path, store: Path) -> None:
    """`--dry-run` prints the plan the build would run: the difference installed on a stored env layer
    and, with --layered as root, the user layer in a directory over it, layered over a stored image."""
    from envbuild.sif.manifest import write_manifest
    from envbuild.store.layout import MANIFEST as MANIFEST_NAME

    loaded = write_spec(tmp_path, ["six", "idna"])
    layers, request = layers_for(tmp_path, store, ["six", "idna"])
    complete_base(request)
    add_env(store, "tiny-parent", compat=layers.env_compat, requirements=["six"], freeze=["six==1.17.0"])
    image = kind_dir(store, "image") / "tiny-old"
    image.mkdir(parents=True)
    (image / "meta.json").write_text(json.dumps({"kind": "image", "parent": "tiny-parent"}))
    (image / "image.sif").write_bytes(b"")
    (image / "complete").write_text("x\n")
    (tmp_path / "tree").mkdir()
    write_manifest(str(tmp_path / "tree"), str(image / MANIFEST_NAME), compression="gzip:6", all_root=False)
    options = BuildOptions(output=tmp_path / "tiny.sif", layered=True)
    text = BuildSession(loaded, options, out=io.StringIO()).dry_run()
    assert "# reusing env layer tiny-parent: installing only the difference" in text
    assert "install the difference on top of env layer tiny-parent" in text
    assert "# --layered: writing only the difference, as a SIF overlay partition over image tiny-old" in text
    assert "in a directory over the env layer" in text
    assert not (store / "locks").exists() or not any((store / "locks").rglob("*"))  # nothing held or written
    # Without --layered: the same env parent, the whole tree squashed.
    plain = BuildSession(loaded, replace(options, layered=False), out=io.StringIO()).dry_run()
    assert "reusing env layer tiny-parent" in plain and "SIF overlay partition" not in plain


def test_the_executor_has_a_handler_for_every_action_type() -> None:
    import typing

    from envbuild.builder.execute.executor import _ACTION_HANDLERS
    from envbuild.builder.plan.actions import Action

    assert set(_ACTION_HANDLERS) == set(typing.get_args(Action))
