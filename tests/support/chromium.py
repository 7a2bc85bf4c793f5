"""Headless Chromium (Debian's `chromium`, provisioned by provision/install.sh) for the catalogue page:
a screenshot, and the DOM after the page's script ran. Each call gets its own throw-away profile and a
time limit; as root Chromium refuses to start without --no-sandbox."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

CHROMIUM_NAMES = ("chromium", "chromium-browser")
TIMEOUT_S = 90  # a cold start under load took ~3 s here; a hung one must not hang CI


def find_chromium() -> str | None:
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None


def _run(chromium: str, url: str, *extra: str) -> subprocess.CompletedProcess[str]:
    with tempfile.TemporaryDirectory(prefix="envbuild-chromium-") as profile:
        argv = [chromium, "--headless", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
                "--disable-extensions", f"--user-data-dir={profile}", *extra, url]
        if os.geteuid() == 0:
            argv.insert(1, "--no-sandbox")
        result = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S)
    assert result.returncode == 0, f"{' '.join(argv)} exited {result.returncode}: {result.stderr[-3000:]}"
    return result


def page_url(page: Path, query: str = "") -> str:
    """file:// URL of the page, with `query` ("?q=torch" or "#q=torch&differ=1") appended."""
    return page.resolve().as_uri() + query


def screenshot(chromium: str, page: Path, png: Path, *, query: str = "", width: int = 1400, height: int = 1000) -> Path:
    _run(chromium, page_url(page, query), f"--screenshot={png}", f"--window-size={width},{height}")
    assert png.is_file(), f"chromium wrote no {png}"
    return png


def dump_dom(chromium: str, page: Path, query: str = "") -> str:
    """The document as the browser holds it after the page's script ran (the filter applied)."""
    return _run(chromium, page_url(page, query), "--dump-dom").stdout
