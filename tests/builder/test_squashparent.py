"""`--layered`: which stored image a build layers its difference over, and the plan that does it."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from envbuild.builder.plan.layers import image_key
from envbuild.builder.plan.planrender import render_build_plan
from envbuild.builder.sessions.squashparent import env_lineage, find_squash_parent
from envbuild.sif.manifest import write_manifest
from envbuild.store.layout import MANIFEST as MANIFEST_NAME
from envbuild.store.layout import kind_dir
from tests.support.plan_fixtures import fixed_plan, fixed_request


def _env(store: Path, name: str, parent: str) -> None:
    entry = kind_dir(store, "env") / name
    entry.mkdir(parents=True)
    (entry / "meta.json").write_text(json.dumps({"kind": "env", "parent": parent}))
    (entry / "complete").write_text("x\n")


def _image(store: Path, name: str, env: str, *, compression: str = "gzip:6", manifest: bool = True) -> None:
    entry = kind_dir(store, "image") / name
    entry.mkdir(parents=True)
    (entry / "meta.json").write_text(json.dumps({"kind": "image", "parent": env}))
    (entry / "image.sif").write_bytes(b"")
    (entry / "complete").write_text("x\n")
    if manifest:
        tree = store / "tree"
        tree.mkdir(exist_ok=True)
        write_manifest(str(tree), str(entry / MANIFEST_NAME), compression=compression, all_root=False)


def test_the_image_on_the_nearest_env_layer_with_a_manifest_and_the_same_compression_wins(tmp_path: Path) -> None:
    store = tmp_path / "store"
    _env(store, "grandparent", "bases/debootstrap")
    _env(store, "parent", "grandparent")
    _image(store, "on-grandparent", "grandparent")
    _image(store, "on-parent-zstd", "parent", compression="zstd")
    _image(store, "on-parent-old", "parent", manifest=False)  # built before manifests: cannot be a parent
    assert env_lineage(store, "new", "parent") == ["new", "parent", "grandparent"]
    find = dict(env_entry="new", env_parent="parent", image_entry="new-image", all_root=False)
    assert find_squash_parent(store, compression="gzip:6", **find) == "on-grandparent"  # type: ignore[arg-type]
    assert find_squash_parent(store, compression="zstd", **find) == "on-parent-zstd"  # type: ignore[arg-type]
    assert find_squash_parent(store, compression="xz", **find) is None  # type: ignore[arg-type]
    _image(store, "on-new", "new")  # only the user layer changed: the image on the same env layer
    assert find_squash_parent(store, compression="gzip:6", **find) == "on-new"  # type: ignore[arg-type]


def test_plan_writes_the_manifest_or_the_layered_image() -> None:
    full = render_build_plan(fixed_plan("envs/local-cpu-pytorch.yaml"))
    assert "-m envbuild.sif.manifest" in full and "layeredsquash" not in full
    request = fixed_request("envs/local-cpu-pytorch.yaml")
    layered_request = replace(request, options=replace(request.options, layered=True), squash_parent="ref-0123")
    from envbuild.builder.plan.imageplan import plan_build

    layered = render_build_plan(plan_build(layered_request))
    assert "as a layer over image ref-0123" in layered
    assert "-m envbuild.sif.layeredwriter" in layered and "/images/ref-0123/image.sif" in layered
    assert "mksquashfs" not in layered.split("layeredsquash")[0].split("as a layer over image")[1]
    # A layered image never stands in for a full one, nor the other way round.
    assert image_key(layered_request, "e" * 64) != image_key(request, "e" * 64)
