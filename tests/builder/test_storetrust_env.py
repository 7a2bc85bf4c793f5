"""Env layers taken from the store, through the real session (no container runtime: the base and env layers
are small stand-in trees, and the build stops where the executor would run the plan): from a store others
can write, an env layer whose tree does not match the digest its env step recorded, or that has none, is not
used (built again, or another parent chosen); from the user's own store nothing is hashed. Tampered meta.json
and freeze.txt files, which only steer the choice of a parent, do no harm."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest

import envbuild.host.buildhost
import envbuild.shared.treedigest
from envbuild.builder.plan.actions import RecordDigest
from envbuild.builder.plan.plandata import BuildPlan, Layers
from envbuild.builder.sessions.buildrequest import BuildOptions
from envbuild.builder.sessions.imagesession import BuildSession
from envbuild.envspec.loadspec import LoadedSpec
from envbuild.shared.treedigest import tree_digest
from envbuild.store.integrity import write_content_record
from envbuild.store.layout import StorePaths, kind_dir
from tests.builder.test_buildsession import BuildStarted
from tests.builder.test_storetrust import STRANGER, share_with_group, stored_base
from tests.store.test_integrity import chown_tree
from tests.support.plan_fixtures import session_store

SITE = "opt/envbuild/venv/lib/python3.11/site-packages"


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return session_store(tmp_path, monkeypatch)


@pytest.fixture
def planned(monkeypatch: pytest.MonkeyPatch) -> list[BuildPlan]:
    """The plan the session hands to the executor (which then stops the build)."""
    plans: list[BuildPlan] = []

    def execute(_executor: object, plan: BuildPlan) -> None:
        plans.append(plan)
        raise BuildStarted

    monkeypatch.setattr("envbuild.builder.execute.executor.BuildExecutor.execute", execute)
    return plans


@pytest.fixture
def digests(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The trees digested (each a walk of a whole env layer on a real store)."""
    walked: list[str] = []

    def counted(root: str) -> str:
        walked.append(root)
        return tree_digest(root)

    monkeypatch.setattr(envbuild.shared.treedigest, "tree_digest", counted)
    return walked


def stored_env(store: Path, name: str, layers: Layers, packages: dict[str, str], *, record: bool = True) -> Path:
    """A complete env layer named `name`, as the env step leaves it: its tree (a venv with `packages`), meta.json
    (made for `layers`' base, installer and sources), freeze.txt and, with `record`, its tree digest."""
    entry = Path(StorePaths(str(store)).env(name).dir)
    site = entry / "rootfs" / SITE
    site.mkdir(parents=True)
    for package, version in packages.items():
        (site / f"{package}.py").write_text(f"__version__ = {version!r}\n")
    (entry / "meta.json").write_text(json.dumps({"kind": "env", "key": "k", "compat": layers.env_compat, "parent": None,
                                                 "requirements": sorted(packages)}) + "\n")
    (entry / "freeze.txt").write_text("".join(f"{p}=={v}\n" for p, v in sorted(packages.items())))
    if record:
        (entry / "digest").write_text(tree_digest(str(entry / "rootfs")) + "\n")
    (entry / "complete").write_text("tiny\n")
    return entry


def tamper(entry: Path, package: str = "six") -> None:
    """One byte of a package's file, the size kept: the kind of change only a digest tells."""
    path = entry / "rootfs" / SITE / f"{package}.py"
    path.write_text(path.read_text().replace("_", "X", 1))


def build(loaded: LoadedSpec, output: Path, store: Path, **options: object) -> str:
    out = io.StringIO()
    with pytest.raises(BuildStarted):
        BuildSession(loaded, BuildOptions(output=output, cache_dir=store, **options), out=out).build()  # type: ignore[arg-type]
    return out.getvalue()


def env_step_cached(plan: BuildPlan) -> bool:
    """Whether the executor would find the plan's env layer complete (and so use it as it is)."""
    step = next(step for step in plan.steps if step.name == "env")
    return bool(step.skip_if_exists) and os.path.exists(step.skip_if_exists)


def test_an_untampered_env_layer_in_a_group_writable_store_is_used(tmp_path: Path, store: Path,
                                                                    planned: list[BuildPlan], digests: list[str]) -> None:
    loaded, output, layers = stored_base(tmp_path, store, ["six"])
    entry = stored_env(store, layers.env_entry, layers, {"six": "1.16.0"})
    share_with_group(store)
    text = build(loaded, output, store)
    assert "warning" not in text
    assert env_step_cached(planned[0])
    assert f"{entry}/rootfs" in digests, "digested again before its files are hard-linked into the sandbox"


def test_a_tampered_env_layer_in_a_group_writable_store_is_built_again(tmp_path: Path, store: Path,
                                                                       planned: list[BuildPlan]) -> None:
    loaded, output, layers = stored_base(tmp_path, store, ["six"])
    entry = stored_env(store, layers.env_entry, layers, {"six": "1.16.0"})
    share_with_group(store)
    tamper(entry)
    text = build(loaded, output, store)
    assert f"warning: env entry {entry.name} in the store {store} does not match its content record: rootfs has " \
           f"sha256:" in text
    assert f"{store} is writable by its group" in text and "not used, building it again" in text
    assert "envbuild cache verify --cache-dir" in text
    assert not (entry / "complete").exists(), "withdrawn under its lock: the env step makes it again"
    assert not env_step_cached(planned[0])


def test_an_env_layer_a_stranger_made_is_checked(tmp_path: Path, store: Path, planned: list[BuildPlan]) -> None:
    """Two users: the env layer was made by another user (uid 65534), nothing group-writable."""
    if os.geteuid() != 0:
        pytest.skip("chown to a stranger needs root")
    loaded, output, layers = stored_base(tmp_path, store, ["six"])
    entry = stored_env(store, layers.env_entry, layers, {"six": "1.16.0"})
    chown_tree(entry, STRANGER)
    os.lchown(entry, STRANGER, STRANGER)
    (entry / "digest").write_text(tree_digest(str(entry / "rootfs")) + "\n")  # as its maker recorded it
    assert "warning" not in build(loaded, output, store)
    assert env_step_cached(planned[-1])
    tamper(entry)
    text = build(loaded, output, store)
    assert f"belongs to user nobody (uid {STRANGER})" in text and "not used, building it again" in text
    assert not env_step_cached(planned[-1])


def test_an_env_layer_without_a_record_in_a_shared_store_is_not_trusted(tmp_path: Path, store: Path,
                                                                        planned: list[BuildPlan]) -> None:
    loaded, output, layers = stored_base(tmp_path, store, ["six"])
    entry = stored_env(store, layers.env_entry, layers, {"six": "1.16.0"}, record=False)
    share_with_group(store)
    text = build(loaded, output, store)
    assert "it has no recorded tree digest (made by an older envbuild), so it cannot be verified" in text
    assert not (entry / "complete").exists() and not env_step_cached(planned[0])


@pytest.mark.parametrize("record", [True, False])
def test_the_users_own_store_hashes_no_env_layer(tmp_path: Path, store: Path, planned: list[BuildPlan],
                                                 digests: list[str], record: bool) -> None:
    """Write access is trust: a changed or unrecorded env layer in the user's own store is used as it is, and
    no tree is digested (the reference's env layer: 1.7 s warm, 5.8 s cold)."""
    loaded, output, layers = stored_base(tmp_path, store, ["six"])
    entry = stored_env(store, layers.env_entry, layers, {"six": "1.16.0"}, record=record)
    tamper(entry)
    assert "warning" not in build(loaded, output, store)
    assert env_step_cached(planned[0])
    assert digests == []


def test_a_tampered_parent_in_a_shared_store_is_passed_over_for_the_next(tmp_path: Path, store: Path,
                                                                         planned: list[BuildPlan]) -> None:
    """A +1 build: the best parent (most packages) does not match its record, so the next best is chosen."""
    loaded, output, layers = stored_base(tmp_path, store, ["six", "tabulate"])
    best = stored_env(store, "tiny-1111111111111111", layers, {"six": "1.16.0"})
    other = stored_env(store, "tiny-2222222222222222", layers, {})
    share_with_group(store)
    tamper(best)
    text = build(loaded, output, store)
    assert f"warning: env entry {best.name} in the store {store} does not match its content record" in text
    assert "not used, installing on another env layer or from the base" in text
    assert f"reusing env layer {other.name}: installing only the difference" in text
    assert planned[0].layers.env_parent == other.name
    assert (best / "complete").exists(), "a parent passed over is left as it is"
    env = next(step for step in planned[0].steps if step.name == "env")
    record = next(action for action in env.actions if isinstance(action, RecordDigest))
    assert record.reuse == f"{other}/file-digests", "the new layer's record reads only what the install added"


def test_an_untampered_parent_in_a_shared_store_is_taken(tmp_path: Path, store: Path, planned: list[BuildPlan]) -> None:
    loaded, output, layers = stored_base(tmp_path, store, ["six", "tabulate"])
    best = stored_env(store, "tiny-1111111111111111", layers, {"six": "1.16.0"})
    share_with_group(store)
    text = build(loaded, output, store)
    assert "warning" not in text and planned[0].layers.env_parent == best.name


def test_a_parent_without_a_record_in_a_shared_store_is_not_taken(tmp_path: Path, store: Path,
                                                                  planned: list[BuildPlan]) -> None:
    loaded, output, layers = stored_base(tmp_path, store, ["six", "tabulate"])
    stored_env(store, "tiny-1111111111111111", layers, {"six": "1.16.0"}, record=False)
    share_with_group(store)
    text = build(loaded, output, store)
    assert "it has no recorded tree digest" in text and planned[0].layers.env_parent is None


@pytest.mark.parametrize("meta, freeze", [
    ("[1, 2]", None),
    ('{"kind": "env", "compat": null}', None),
    (None, "six==1.16.0\nimport os; os.system('id')\n"),
    (None, "\x00\xff garbage"),
    ('{"kind": "env", "compat": "%(compat)s", "requirements": "six"}', None),
    ("x" * (2 << 20), None),
])
def test_tampered_meta_or_freeze_files_in_a_shared_store_do_no_harm(tmp_path: Path, store: Path,
                                                                    planned: list[BuildPlan], meta: str | None,
                                                                    freeze: str | None) -> None:
    """They only steer the choice of a parent: one that is not plain data of the shape the env step writes
    leaves that layer out (no traceback, nothing read as code); the build installs from the base."""
    loaded, output, layers = stored_base(tmp_path, store, ["six", "tabulate"])
    entry = stored_env(store, "tiny-1111111111111111", layers, {"six": "1.16.0"})
    if meta is not None:
        (entry / "meta.json").write_text(meta.replace("%(compat)s", layers.env_compat))
    if freeze is not None:
        (entry / "freeze.txt").write_bytes(freeze.encode("latin-1"))
    share_with_group(store)
    text = build(loaded, output, store)
    assert "reusing env layer" not in text
    assert planned[0].layers.env_parent is None


def test_layered_builds_check_the_env_layer_their_user_layer_lies_over(tmp_path: Path, store: Path,
                                                                        planned: list[BuildPlan],
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """--layered as root: the user layer is a directory over the env layer itself (envbuild.builder.plan.upperplan),
    which is checked as a sandbox's would be."""
    if os.geteuid() != 0:
        pytest.skip("the user layer lies over the env layer only in builds as root")
    loaded, output, layers = stored_base(tmp_path, store, ["six"])
    entry = stored_env(store, layers.env_entry, layers, {"six": "1.16.0"})
    image = Path(StorePaths(str(store)).image("tiny-3333333333333333").dir)
    image.mkdir(parents=True)
    (image / "image.sif").write_bytes(b"SIF" * 100)  # the image layered over: only its record is looked at here
    write_content_record(image, files=("image.sif",))
    (image / "complete").write_text("tiny\n")
    share_with_group(store)
    tamper(entry)
    monkeypatch.setattr("envbuild.builder.sessions.squashparent.find_squash_parent", lambda *_, **__: image.name)
    text = build(loaded, output, store, layered=True)
    assert f"warning: env entry {entry.name} in the store {store} does not match its content record" in text
    assert any(step.name == "configure" and "in a directory over the env layer" in step.title for step in planned[0].steps)
    assert not env_step_cached(planned[0])


def test_a_parent_checked_while_the_lock_was_resolved_is_not_digested_again(tmp_path: Path, store: Path,
                                                                           planned: list[BuildPlan],
                                                                           digests: list[str]) -> None:
    """A stale lock: the likely parent was digested beside the resolution (envbuild.builder.sessions.prefetch); the build
    takes that verdict for it, and checks the next best itself."""
    from envbuild.builder.sessions.prefetch import ParentPrefetch

    loaded, output, layers = stored_base(tmp_path, store, ["six", "tabulate"])
    best = stored_env(store, "tiny-1111111111111111", layers, {"six": "1.16.0"})
    other = stored_env(store, "tiny-2222222222222222", layers, {})
    share_with_group(store)
    tamper(best)
    work = kind_dir(store, "work") / "tiny-prefetch"
    session = BuildSession(loaded, BuildOptions(output=output, cache_dir=store), out=io.StringIO())
    session._prefetch = ParentPrefetch(parent=best.name, store_root=str(store), work_dir=str(work), tree=f"{work}/rootfs",
                                       snapshot=f"{work}/parent.snapshot").check(str(best))
    with pytest.raises(BuildStarted):
        session.build()
    text = session.out.getvalue()  # type: ignore[attr-defined]
    assert f"warning: env entry {best.name} in the store {store} does not match its content record" in text
    assert planned[0].layers.env_parent == other.name
    assert digests.count(f"{best}/rootfs") == 1 and digests.count(f"{other}/rootfs") == 1
