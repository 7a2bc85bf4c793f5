"""Regenerate the README's picture of `envbuild catalogue` (docs/catalogue-example.png):

    .venv/bin/python -m tests.catalogue.example [docs/catalogue-example.png]

Makes the small example images (tests/support/catalogue_images.py), adds the reference image when it was built
(build/local-cpu-pytorch.sif) and a truncated file, runs the project's own `envbuild catalogue` on the
directory, and has headless Chromium photograph the page with the "versions differ" filter on."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.conftest import REPO
from tests.support.catalogue_images import example_images
from tests.support.chromium import find_chromium, screenshot
from tests.support.inventory_layout import fixture_image

REFERENCE = REPO / "build" / "local-cpu-pytorch.sif"


def make_example(png: Path) -> Path:
    chromium = find_chromium()
    if chromium is None:
        raise SystemExit("chromium is not installed: apt-get install --no-install-recommends chromium")
    with tempfile.TemporaryDirectory(prefix="catalogue-example-") as scratch:
        work = Path(scratch)
        example_images(work / "images")
        if REFERENCE.is_file():
            os.symlink(REFERENCE, work / "images" / REFERENCE.name)
        (work / "images" / "old-broken.sif").write_bytes(fixture_image("gzip").read_bytes()[:40000])
        result = subprocess.run([str(REPO / "bin" / "envbuild"), "catalogue", "images/", "-o", "site",
                                 "--title", "Site images"], cwd=work, capture_output=True, text=True, timeout=300,
                                env={**os.environ, "ENVBUILD_CACHE_DIR": str(work / "cache")})
        print(result.stdout + result.stderr, end="")
        if not (work / "site" / "index.html").is_file():
            raise SystemExit(f"envbuild catalogue exited {result.returncode} without a page")
        return screenshot(chromium, work / "site" / "index.html", png.resolve(), query="#differ=1", height=1000)


if __name__ == "__main__":
    target = Path(sys.argv[1] if len(sys.argv) > 1 else REPO / "docs" / "catalogue-example.png")
    target.parent.mkdir(parents=True, exist_ok=True)
    print(make_example(target), target.stat().st_size, "bytes")
