"""`envbuild verify X.sqsh [SPEC] [--base BASE.sif]`: does a venv overlay hold what its record, its lock
and a spec say, and is BASE the image it was made for? Everything is read from the files, as for images
(envbuild.verify.imagecheck, whose rules this follows): the record .envbuild/overlay.json, the embedded spec
and lock, the dist-infos in the overlay's venv, and with --base the base's identity and packages.

What differs from an image: the overlay holds only the packages it adds. Those its record lists as
kept from the base are met by the base, so a lock's pins for them are not expected in the overlay, and
with --base they are checked where they are: in what the overlay's Python sees of that base."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from envbuild.builder.plan.layers import VENV_SEED  # seeded by `python -m venv`: the record may leave them out
from envbuild.envspec.torchfamily import TorchBuild, builds_from_pins
from envbuild.inventory.pyenvs import Inventory
from envbuild.shared.errors import EnvbuildError
from envbuild.shared.overlayformat import BASE_PTH, LOCK_FILE, RECORD_FILE, SPEC_FILE
from envbuild.verify.imagecheck import (
    Difference,
    ImageContents,
    Verification,
    add_findings,
    check_embedded_lock,
    check_family,
    compare_versions,
    pins,
    verify_against_spec,
)


def _read_overlay(path: Path) -> tuple[ImageContents, Inventory]:
    from envbuild.inventory.image import guarded, inventory_of, open_image
    from envbuild.inventory.installedtorch import env_family
    from envbuild.inventory.overlayfile import is_overlay_file
    from envbuild.inventory.pkgmeta import canonical_name

    if not path.exists():
        raise EnvbuildError(f"{path}: no such overlay", "give the path of the .sqsh file `envbuild build` wrote")
    if not is_overlay_file(str(path)):
        raise EnvbuildError(f"{path} is not a venv overlay (not a squashfs file)",
                            "envbuild verify IMAGE checks a .sif image; overlays are .sqsh files")
    with open_image(str(path)) as image:
        if image.overlay is None:
            raise EnvbuildError(f"{path} is not an envbuild overlay (it has no {RECORD_FILE})",
                                "envbuild packages / envbuild inspect list what any squashfs holds")
        mount = image.overlay["mount"].rstrip("/")

        def text(name: str) -> str | None:
            data = image.tree.read(f"{mount}/{name}", 64 << 20)
            return None if data is None else data.decode("utf-8", errors="replace")

        inventory = guarded(str(path), lambda: inventory_of(image))
        family = guarded(str(path), lambda: env_family(image.tree, mount))  # its own: the base's .pth lines lie outside
        record, spec_text, lock_text = image.overlay, text(SPEC_FILE), text(LOCK_FILE)
    venv_prefix = inventory.overlay.mount if inventory.overlay else mount
    installed = {canonical_name(p.name): p.version for p in inventory.packages
                 if p.environment == venv_prefix and p.source == "pip"}
    kept = pins((record.get("packages") or {}).get("kept") or [])
    return ImageContents(record=record, spec_text=spec_text, lock_text=lock_text, installed=installed, kept=kept,
                         noun="the overlay", lock_location=f"{mount}/{LOCK_FILE}", family=tuple(family)), inventory


def verify_overlay(overlay: Path, spec_path: Path | None = None, base: Path | None = None) -> Verification:
    contents, inventory = _read_overlay(overlay)
    result = Verification(image=str(overlay), spec=str(spec_path) if spec_path else None, kind="overlay")
    added = pins((contents.record.get("packages") or {}).get("added") or [])
    # pip comes with the venv unless it was made --without-pip; a record that lists it is held to it.
    lines = compare_versions(added, contents.installed, "the record", ignore=VENV_SEED - added.keys(), noun="the overlay")
    add_findings(result, "record", lines, f"record: all {len(added)} added packages installed in the overlay as recorded")
    check_embedded_lock(result, contents)
    if spec_path is not None:
        verify_against_spec(result, contents, spec_path)
    # The overlay's torch family against the base's torch: read from the base where given, else the
    # versions the record kept from it (labels only).
    base_family = builds_from_pins(list(contents.kept.items()))
    if base is not None:
        base_family = _verify_base(result, contents, overlay, inventory, base)
    check_family(result, [*contents.family, *base_family], "the overlay with its base")
    return result


def _verify_base(result: Verification, contents: ImageContents, overlay: Path, inventory: Inventory, base: Path
                 ) -> list[TorchBuild]:
    """Checks the base against the record; returns the torch family the overlay's Python sees in it."""
    from envbuild.inventory.image import guarded, inventory_of, open_image, sif_image_id
    from envbuild.inventory.installedtorch import family_in_site_dirs

    if not base.exists():
        raise EnvbuildError(f"{base}: no such base image",
                            "give the .sif the overlay was made for (envbuild inspect OVERLAY shows its path at build time)")
    recorded: dict[str, Any] = contents.record.get("base") or {}
    sif_id = sif_image_id(str(base))
    _check_identity(result, base, recorded, sif_id)
    python = contents.record.get("python") or {}
    with open_image(str(base)) as image:
        base_inventory = inventory_of(image)
        site_dirs = list(inventory.overlay.base_site_dirs) if inventory.overlay else []
        family = guarded(str(base), lambda: family_in_site_dirs(image.tree, site_dirs))
        interpreter = python.get("path")
        if interpreter and image.tree.read(interpreter, 1) is None:
            result.differences.append(Difference("base", f"python: {base} has no {interpreter}, the interpreter "
                                                         "the overlay's venv runs"))
    _check_kept(result, contents, overlay, inventory, base, base_inventory, sif_id)
    return family


def _check_identity(result: Verification, base: Path, recorded: dict[str, Any], sif_id: str | None) -> None:
    """The base is the image the overlay was made for: the same SIF id (apptainer sign adds objects but
    keeps the header's id), or where there is none to compare, the same content digest."""
    from envbuild.shared.treedigest import file_digest

    made_for = recorded.get("ref") or recorded.get("path") or "its base"
    if sif_id is not None and recorded.get("sif_id"):
        if sif_id == recorded["sif_id"]:
            result.passed.append(f"base: {base} is the image the overlay was made for (SIF id {sif_id})")
        else:
            result.differences.append(Difference("base", f"base: {base} has SIF id {sif_id}, the overlay was made for "
                                                         f"{made_for} (SIF id {recorded['sif_id']})"))
        return
    if not recorded.get("digest") or not base.is_file():
        result.passed.append(f"base: neither a SIF id nor a digest to compare {base} with; identity not checked")
        return
    digest = file_digest(str(base))
    if digest == recorded["digest"]:
        result.passed.append(f"base: {base} is the image the overlay was made for ({digest})")
    else:
        result.differences.append(Difference("base", f"base: {base} is {digest}, the overlay was made for "
                                                     f"{made_for} ({recorded['digest']})"))


def _check_kept(result: Verification, contents: ImageContents, overlay: Path, inventory: Inventory, base: Path,
                base_inventory: Inventory, sif_id: str | None) -> None:
    """The packages the record kept from the base, against what the overlay's Python sees of this base."""
    from envbuild.inventory.combine import overlaid_inventory
    from envbuild.inventory.pkgmeta import canonical_name

    combined = overlaid_inventory(str(base), base_inventory, sif_id, [(str(overlay), inventory)])
    mount = inventory.overlay.mount if inventory.overlay else ""
    inherited = {canonical_name(p.name): p.version for p in combined.packages
                 if p.environment == mount and p.source.startswith("pip (base ")}
    lines = []
    for name, version in sorted(contents.kept.items()):
        have = inherited.get(name)
        if have is None and name not in contents.installed:
            lines.append(f"{name} {version}: kept from the base by the record, {base} does not provide it")
        elif have is not None and have != version:
            lines.append(f"{name}: the record kept {version} from the base, {base} has {have}")
    # A .pth line naming a directory the base lacks: the overlay's Python would miss what it was built on.
    lines += [problem.message for problem in combined.problems if problem.path.endswith(BASE_PTH)]
    add_findings(result, "base", lines, f"base: all {len(contents.kept)} packages kept from the base are in {base} "
                                        "at their recorded versions")

