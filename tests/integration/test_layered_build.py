"""`envbuild build --layered` against the real tools, on a small spec: the added package and the changed
user layer go into a SIF squashfs overlay partition over the stored full image (nothing squashed
again); a removed file is hidden by a whiteout; the runtime and `envbuild packages`/`verify` see the
same tree as a full rebuild of the spec; two layered builds from one lock give the same bytes."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from envbuild.store.layout import kind_dir
from tests.integration.test_build_store import envbuild, store  # noqa: F401 - `store` is a fixture

pytestmark = [pytest.mark.apptainer]

SPEC = """\
name: layered
system: local
base: debootstrap:bookworm
python:
  packages:
{packages}
{files}
tests:
  - python -c "import six"
"""
EPOCH = {"SOURCE_DATE_EPOCH": "1767225600"}


def write_spec(directory: Path, packages: list[str], *, with_file: bool) -> Path:
    (directory / "note.txt").write_text("only in the first image\n")
    files = "files:\n  - {src: note.txt, dest: /opt/notes/note.txt}\n" if with_file else ""
    spec = directory / "layered.yaml"
    spec.write_text(SPEC.format(packages="".join(f"    - {p}\n" for p in packages), files=files))
    return spec


def build(spec: Path, output: Path, root: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    from tests.conftest import REPO, run_cli

    result = run_cli([str(REPO / "bin/envbuild"), "build", str(spec), "-o", str(output), "--compression", "zstd", *extra],
                     env_extra={"ENVBUILD_CACHE_DIR": str(root), **EPOCH})
    assert result.returncode == 0, result.stdout + result.stderr[-6000:]
    return result


def packages(image: Path, root: Path) -> list[tuple[str, str, str]]:
    result = envbuild(["packages", "--json", "--no-cache", str(image)], root)
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)
    rows = rows.get("packages", rows) if isinstance(rows, dict) else rows
    return sorted((row["environment"], row["name"], row["version"]) for row in rows)


def partitions(image: Path) -> list[str]:
    from envbuild.sif.reader import read_sif_layout

    return [o.part_type for o in read_sif_layout(image).objects if o.data_type == "partition"]


def test_layered_image_equals_a_full_rebuild_and_is_reproducible(tmp_path: Path, store: Path) -> None:  # noqa: F811
    first = tmp_path / "first.sif"
    build(write_spec(tmp_path, ["six"], with_file=True), first, store)
    assert partitions(first) == ["primary-system"]
    parent_entry = next(p.parent for p in kind_dir(store, "image").glob("*/tree-manifest.json.gz"))
    first_envs = set(kind_dir(store, "env").iterdir())

    spec = write_spec(tmp_path, ["six", "idna"], with_file=False)
    layered = tmp_path / "layered.sif"
    result = build(spec, layered, store, "--layered")
    assert f"over image {parent_entry.name}" in result.stderr, result.stderr[-3000:]
    assert partitions(layered) == ["primary-system", "overlay"]
    # The parent's squashfs is in it byte for byte: only the difference was squashed.
    assert layered.stat().st_size - first.stat().st_size < 2 << 20

    run = subprocess.run(["apptainer", "exec", str(layered), "sh", "-c",
                          "python -c 'import idna, six' && test ! -e /opt/notes/note.txt && echo ok"],
                         capture_output=True, text=True)
    assert run.stdout.strip() == "ok", run.stderr
    verify = envbuild(["verify", str(layered), str(spec)], store)
    assert verify.returncode == 0, verify.stdout + verify.stderr

    # Reproducible: the same parent and lock give the same bytes. The +1 env layer and image are removed from
    # the store first, as in a second store holding the same parent (the record names the env layer's parent).
    for entry in [*(set(kind_dir(store, "env").iterdir()) - first_envs), *(set(kind_dir(store, "image").iterdir()) - {parent_entry})]:
        shutil.rmtree(entry)
    again = tmp_path / "again.sif"
    build(spec, again, store, "--layered")
    assert again.read_bytes() == layered.read_bytes()

    full = tmp_path / "full.sif"
    build(spec, full, store)  # the same spec without --layered: another image key, a full squash
    assert partitions(full) == ["primary-system"]
    assert packages(layered, store) == packages(full, store)
    from envbuild.inventory.image import open_image  # the whiteout hides the file from the reader too

    with open_image(str(layered)) as opened:
        assert opened.tree.children("/opt/notes") in (None, {})
