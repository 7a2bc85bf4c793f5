"""envbuild.builder.sessions.imagelock's base probe: asked once per base and Python, kept in the base's store entry.

The runtime is a stand-in script that answers as the base's Python would and counts its calls; the real
probe runs in tests/lock (apptainer) and in every e2e build."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from envbuild.builder.sessions.imagelock import probe_target, target_cache_file
from envbuild.host.runtime import Runtime
from envbuild.store.layout import kind_dir
from tests.support.plan_fixtures import FIXED_FACTS, fixed_request


def _request_with_runtime(tmp_path: Path, answer: str, *, base_digest: str = "sha256:" + "b" * 64):
    calls = tmp_path / "calls"
    script = tmp_path / "runtime"
    script.write_text(f"#!/bin/sh\necho x >> {calls}\necho '{answer}'\n")
    script.chmod(0o755)
    facts = replace(FIXED_FACTS, runtime=Runtime(str(script), "apptainer"))
    return fixed_request("envs/local-cpu-pytorch.yaml", facts=facts, base_digest=base_digest), calls


def _calls(calls: Path) -> int:
    return len(calls.read_text().split()) if calls.exists() else 0


def test_the_answer_is_kept_for_the_same_base_and_python(tmp_path: Path) -> None:
    request, calls = _request_with_runtime(tmp_path, "3.11.2 x86_64 2.36")
    rootfs, cache = tmp_path / "rootfs", tmp_path / "python-target.json"
    rootfs.mkdir()
    first = probe_target(request, str(rootfs), cache_file=str(cache))
    assert (first.python, first.platform) == ("3.11.2", "x86_64-manylinux_2_36") and _calls(calls) == 1
    again = probe_target(request, str(rootfs), cache_file=str(cache))
    assert again == first and _calls(calls) == 1  # no container started
    assert json.loads(cache.read_text())["base_digest"] == "sha256:" + "b" * 64
    # The venv of an envbuild base is another Python: asked again.
    (rootfs / "opt/envbuild/venv/bin").mkdir(parents=True)
    (rootfs / "opt/envbuild/venv/bin/python").write_text("")
    probe_target(request, str(rootfs), cache_file=str(cache))
    assert _calls(calls) == 2


def test_another_base_digest_or_a_broken_file_asks_again(tmp_path: Path) -> None:
    request, calls = _request_with_runtime(tmp_path, "3.11.2 x86_64 2.36")
    rootfs, cache = tmp_path / "rootfs", tmp_path / "python-target.json"
    rootfs.mkdir()
    probe_target(request, str(rootfs), cache_file=str(cache))
    other = replace(request, base=replace(request.base, digest="sha256:" + "e" * 64))
    probe_target(other, str(rootfs), cache_file=str(cache))
    assert _calls(calls) == 2
    cache.write_text("{not json")
    assert probe_target(other, str(rootfs), cache_file=str(cache)).python == "3.11.2" and _calls(calls) == 3
    # Without a cache file (or a digest) nothing is kept.
    probe_target(other, str(rootfs))
    assert _calls(calls) == 4


@pytest.mark.parametrize("kept", [
    {"version": ["3.11.2"], "platform": "x86_64-manylinux_2_36"},
    {"version": "3.11.2; rm -rf /", "platform": "x86_64-manylinux_2_36"},
    {"version": "3.11.2", "platform": {"x": 1}},
    {"version": "3.11.2", "platform": "x86_64 --index-url http://evil"},
])
def test_a_kept_answer_of_another_shape_is_asked_again(tmp_path: Path, kept: dict[str, object]) -> None:
    """The answer is read as plain data of the shape written: a version and a platform in their own forms."""
    request, calls = _request_with_runtime(tmp_path, "3.11.2 x86_64 2.36")
    rootfs, cache = tmp_path / "rootfs", tmp_path / "python-target.json"
    rootfs.mkdir()
    cache.write_text(json.dumps({"python": request.spec.python.interpreter, "base_digest": request.base.digest, **kept}))
    target = probe_target(request, str(rootfs), cache_file=str(cache))
    assert (target.python, target.platform) == ("3.11.2", "x86_64-manylinux_2_36") and _calls(calls) == 1


def test_a_store_others_can_write_keeps_no_answer(tmp_path: Path) -> None:
    """python-target.json decides what a lock resolves for; where others can write the store it is not read
    (nor written): asking again is one container start."""
    from tests.store.test_integrity import share

    store = tmp_path / "store"
    entry = kind_dir(store, "base") / "debootstrap-bookworm-0123456789abcdef"
    entry.mkdir(parents=True)
    assert target_cache_file(store, str(entry)) == f"{entry}/python-target.json"
    share(store)
    assert target_cache_file(store, str(entry)) is None
