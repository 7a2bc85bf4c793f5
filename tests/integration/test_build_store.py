"""Reproducible and incremental builds against the real tools: the store's layers, lock files, provenance
and verify. Every test gets its own store (so results do not depend on what earlier runs left), seeded
with the shared test cache's debootstrap base (hard links) and uv download cache, so nothing is
debootstrapped or downloaded twice."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from envbuild.store.layout import kind_dir
from tests.conftest import REPO, run_cli, seeded_store

ENVBUILD = str(REPO / "bin/envbuild")

pytestmark = [pytest.mark.apptainer]

TINY_SPEC = """\
name: tiny
system: local
base: debootstrap:bookworm
python:
  packages:
{packages}
env:
  TINY_FLAVOUR: "{flavour}"
tests:
  - python -c "import six"
"""


def write_spec(directory: Path, packages: list[str], flavour: str = "plain") -> Path:
    spec = directory / "tiny.yaml"
    spec.write_text(TINY_SPEC.format(packages="".join(f"    - {p}\n" for p in packages), flavour=flavour))
    return spec


@pytest.fixture
def store(tmp_path: Path, build_cache: Path) -> Path:
    """A fresh store holding the shared cache's complete bases (hard-linked) and its uv cache."""
    # The shared cache gets its base from the session's reference build, or from here the first time.
    return seeded_store(tmp_path / "store", build_cache)


def envbuild(args: list[str], store: Path, **kwargs: object) -> subprocess.CompletedProcess[str]:
    return run_cli([ENVBUILD, *args], env_extra={"ENVBUILD_CACHE_DIR": str(store)}, **kwargs)  # type: ignore[arg-type]


def build(spec: Path, output: Path, store: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    result = envbuild(["build", str(spec), "-o", str(output), "--compression", "zstd", *extra], store)
    assert result.returncode == 0, result.stdout + result.stderr[-6000:]
    return result


def embedded_record(image: Path) -> dict:
    from envbuild.inventory.image import open_image

    with open_image(str(image)) as opened:
        return json.loads(opened.tree.read("/.envbuild/build.json", 1 << 22) or b"{}")


def store_entries(store: Path) -> list[dict]:
    result = envbuild(["cache", "ls", "--json"], store)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_unchanged_spec_is_a_no_op_and_a_removed_output_comes_from_the_store(tmp_path: Path, store: Path) -> None:
    spec, image = write_spec(tmp_path, ["six"]), tmp_path / "out" / "tiny.sif"
    first = build(spec, image, store)
    assert "[build 1/" in first.stderr
    started = time.monotonic()
    again = build(spec, image, store)
    assert time.monotonic() - started < 10  # a sanity bound only; bench/build_cache.py measures it
    assert "is up to date" in again.stderr and "[build" not in again.stderr
    image.unlink()
    restored = build(spec, image, store)
    assert "taken from the store" in restored.stderr and "[build" not in restored.stderr
    assert (tmp_path / "out" / "bin" / "python").exists()
    run = subprocess.run(["apptainer", "exec", str(image), "python", "-c", "import six, os; print(os.environ['TINY_FLAVOUR'])"],
                         capture_output=True, text=True)
    assert run.stdout.strip() == "plain", run.stderr


def test_user_layer_change_reuses_the_env_layer(tmp_path: Path, store: Path) -> None:
    from envbuild.shared.treedigest import tree_digest

    image = tmp_path / "tiny.sif"
    build(write_spec(tmp_path, ["six"], flavour="one"), image, store)
    [env] = [e for e in store_entries(store) if e["kind"] == "env"]
    before = tree_digest(f"{env['path']}/rootfs")
    # --full: the sandbox over the env layer (a default build as root layers the user layer without one)
    changed = build(write_spec(tmp_path, ["six"], flavour="two"), image, store, "--full")
    assert "Python env layer" in changed.stderr and ": cached" in changed.stderr
    assert "hard-link the env layer" in changed.stderr
    assert len([e for e in store_entries(store) if e["kind"] == "env"]) == 1
    # The sandbox shared the layer's files by hard links: the layer must come out unchanged.
    assert tree_digest(f"{env['path']}/rootfs") == before
    run = subprocess.run(["apptainer", "exec", str(image), "printenv", "TINY_FLAVOUR"], capture_output=True, text=True)
    assert run.stdout.strip() == "two"


def test_added_package_installs_only_the_difference_on_the_parent_env(tmp_path: Path, store: Path) -> None:
    image = tmp_path / "tiny.sif"
    build(write_spec(tmp_path, ["six"]), image, store)
    from envbuild.shared.treedigest import tree_digest

    parent = next(e for e in store_entries(store) if e["kind"] == "env")
    before = tree_digest(f"{parent['path']}/rootfs")
    bigger = build(write_spec(tmp_path, ["six", "idna"]), image, store)
    assert f"reusing env layer {parent['name']}" in bigger.stderr
    assert "layered: writing only the difference" in bigger.stderr  # the default over the first image
    # The child shared the parent's files by hard links; the parent is intact and still valid.
    assert "wrote through hard links" not in bigger.stderr
    assert tree_digest(f"{parent['path']}/rootfs") == before and Path(parent["path"], "complete").exists()
    envs = {e["name"]: e for e in store_entries(store) if e["kind"] == "env"}
    assert len(envs) == 2
    child = next(e for name, e in envs.items() if name != parent["name"])
    assert child["meta"]["parent"] == parent["name"]
    freeze = embedded_record(image)["environments"]["/opt/envbuild/venv/bin/python"]
    assert any(x.startswith("six==") for x in freeze) and any(x.startswith("idna==") for x in freeze)


def test_four_concurrent_builds_of_one_spec_build_once_and_all_succeed(tmp_path: Path, store: Path) -> None:
    spec, image = write_spec(tmp_path, ["six"], flavour="concurrent"), tmp_path / "tiny.sif"
    env = dict(os.environ, ENVBUILD_CACHE_DIR=str(store))
    argv = [ENVBUILD, "build", str(spec), "-o", str(image), "--compression", "zstd"]
    processes = [subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(4)]
    outputs = [p.communicate(timeout=1800) for p in processes]
    for process, (_, err) in zip(processes, outputs, strict=True):
        assert process.returncode == 0, err[-4000:]
    installs = [err for _, err in outputs if "create the venv and install (cached after the first build): done" in err]
    assert len(installs) == 1, "exactly one build installs the env layer"
    entries = store_entries(store)
    assert [e["kind"] for e in entries if e["kind"] in ("env", "image")].count("env") == 1
    assert [e["kind"] for e in entries].count("image") == 1
    assert all(e["complete"] for e in entries if e["kind"] in ("base", "env", "image"))
    assert not [e for e in entries if e["kind"] == "work"], "no build left its work dir behind"
    assert not list(tmp_path.glob("tiny.sif.partial-*"))
    run = subprocess.run(["apptainer", "exec", str(image), "python", "-c", "import six"], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr


def test_lock_is_deterministic_and_a_locked_rebuild_installs_the_same_packages(tmp_path: Path, store: Path) -> None:
    spec = write_spec(tmp_path, ["six", "idna"])
    lock_file = tmp_path / "tiny.lock"
    first = envbuild(["lock", str(spec)], store)
    assert first.returncode == 0, first.stderr
    text = lock_file.read_text()
    again = envbuild(["lock", str(spec)], store)
    assert again.returncode == 0 and "is unchanged" in again.stderr
    assert lock_file.read_text() == text
    assert "six:" in text and "sha256:" in text and "base-digest: sha256:" in text

    image = tmp_path / "tiny.sif"
    build(spec, image, store, "--locked")
    record = embedded_record(image)
    assert record["lock"]["sha256"]
    ok = envbuild(["verify", str(image), str(spec)], store)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    # Throw the env and image layers away: the rebuild resolves nothing and installs the same set.
    for entry in store_entries(store):
        if entry["kind"] in ("env", "image"):
            assert envbuild(["cache", "rm", f"{entry['kind']}/{entry['name']}"], store).returncode == 0
    image.unlink()
    build(spec, image, store, "--locked")
    rebuilt = embedded_record(image)
    assert rebuilt["environments"] == record["environments"]
    assert rebuilt["layers"]["image"] == record["layers"]["image"]


def test_stale_lock_is_refused_and_the_old_image_kept(tmp_path: Path, store: Path) -> None:
    spec = write_spec(tmp_path, ["six"])
    assert envbuild(["lock", str(spec)], store).returncode == 0
    image = tmp_path / "tiny.sif"
    build(spec, image, store, "--locked")
    before = image.stat().st_mtime_ns
    write_spec(tmp_path, ["six", "idna"])
    stale = envbuild(["build", str(spec), "-o", str(image), "--locked"], store)
    assert stale.returncode != 0
    assert "is stale" in stale.stderr and "requirement added: idna" in stale.stderr
    assert "envbuild lock" in stale.stderr
    assert image.stat().st_mtime_ns == before


def test_verify_catches_a_changed_package(tmp_path: Path, store: Path) -> None:
    spec = write_spec(tmp_path, ["six"])
    assert envbuild(["lock", str(spec)], store).returncode == 0
    image = tmp_path / "tiny.sif"
    build(spec, image, store, "--locked")
    assert envbuild(["verify", str(image)], store).returncode == 0
    # The lock now says another six than the image has.
    lock_file = tmp_path / "tiny.lock"
    lock_file.write_text(lock_file.read_text().replace("version: 1.17.0", "version: 1.16.0"))
    changed = envbuild(["verify", str(image), str(spec)], store)
    assert changed.returncode == 1
    assert "six: tiny.lock has 1.16.0, the image has 1.17.0" in changed.stdout
    # And a spec asking for another version than installed.
    write_spec(tmp_path, ["six==1.16.0"])
    lock_file.unlink()
    wanted = envbuild(["verify", str(image), str(spec), "--json"], store)
    assert wanted.returncode == 1
    messages = [d["message"] for d in json.loads(wanted.stdout)["differences"]]
    assert "six: the spec wants six==1.16.0, the image has 1.17.0" in messages


@pytest.fixture(autouse=True)
def _no_leftover_store(store: Path):
    yield
    shutil.rmtree(store, ignore_errors=True)


def test_same_lock_and_epoch_give_a_bit_identical_sif(tmp_path: Path, store: Path, build_cache: Path) -> None:
    """Two independent builds (separate stores: own env layer, own image) from one lock with
    SOURCE_DATE_EPOCH: hash-based .pyc files, clamped times, fixed SIF header -> the same bytes."""
    spec = write_spec(tmp_path, ["six", "idna"])
    assert envbuild(["lock", str(spec)], store).returncode == 0
    second_store = tmp_path / "store2"
    (second_store / "bases").mkdir(parents=True)
    for entry in kind_dir(store, "base").iterdir():
        subprocess.run(["cp", "-al", str(entry), str(second_store / "bases" / entry.name)], check=True)
    (second_store / "uv").symlink_to(build_cache / "uv")
    images = []
    for index, root in enumerate((store, second_store)):
        image = tmp_path / f"tiny-{index}.sif"
        result = run_cli([ENVBUILD, "build", str(spec), "-o", str(image), "--locked", "--compression", "zstd"],
                         env_extra={"ENVBUILD_CACHE_DIR": str(root), "SOURCE_DATE_EPOCH": "1767225600"})
        assert result.returncode == 0, result.stderr[-4000:]
        images.append(image.read_bytes())
    shutil.rmtree(second_store, ignore_errors=True)
    assert images[0] == images[1]
