"""`envbuild verify IMAGE [SPEC]`: an image checked against its build record and lock (envbuild.verify.imagecheck),
or a venv overlay against its record, its lock and the base it was made for (envbuild.verify.overlaycheck),
whichever IMAGE is; then against SPEC and SPEC.lock when given."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from envbuild.shared.errors import EXIT_CLEAN, EXIT_PROBLEMS, UsageError

if TYPE_CHECKING:
    from pathlib import Path


def verify(image: Path, spec: Path | None, base: Path | None, *, as_json: bool) -> tuple[str, int]:
    """The report (each difference listed; or JSON) and the exit status: EXIT_PROBLEMS when anything differs."""
    from envbuild.inventory.overlayfile import is_overlay_file
    from envbuild.verify.imagecheck import render_verification, verification_to_dict, verify_image

    if is_overlay_file(str(image)):
        from envbuild.verify.overlaycheck import verify_overlay

        result = verify_overlay(image, spec, base)
    elif base is not None:
        raise UsageError(f"--base is for venv overlays; {image} is not one (not a squashfs file)",
                         "leave out --base: an image carries its own base")
    else:
        result = verify_image(image, spec)
    text = json.dumps(verification_to_dict(result), indent=2) + "\n" if as_json else render_verification(result)
    return text, EXIT_CLEAN if result.ok else EXIT_PROBLEMS
