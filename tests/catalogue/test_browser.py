"""The catalogue page in a real browser (headless Chromium): a screenshot shows the images and the matrix
with its marks, and the search filters rows when asked through the URL (?q=..., #q=...&differ=1), as the
box does when typed into. Chromium is provisioned like apptainer: missing, these tests fail, unless
ENVBUILD_ALLOW_SKIP=1 (a quick run elsewhere). About 10 s: three browser starts."""

from __future__ import annotations

import os
from html.parser import HTMLParser
from pathlib import Path

import pytest

from tests.conftest import REPO, run_cli
from tests.support.catalogue_images import example_images
from tests.support.chromium import dump_dom, find_chromium, screenshot

pytestmark = pytest.mark.browser

ENVBUILD = str(REPO / "bin" / "envbuild")
OTHER_RGB = (0xFF, 0xE8, 0xA3)  # the --other colour of envbuild.catalogue.pageassets: a differing cell


@pytest.fixture(scope="module")
def chromium() -> str:
    found = find_chromium()
    if found is None:
        message = "chromium is not installed (run provision/install.sh, or apt-get install chromium)"
        if os.environ.get("ENVBUILD_ALLOW_SKIP") == "1":
            pytest.skip(message)
        pytest.fail(message, pytrace=False)
    return found


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("catalogue")
    images = example_images(work / "images")
    result = run_cli([ENVBUILD, "catalogue", *map(str, images), "-o", str(work / "site")],
                     env_extra={"ENVBUILD_CACHE_DIR": str(work / "cache")})
    assert result.returncode == 0, result.stderr
    return work / "site" / "index.html"


class _Rows(HTMLParser):
    """The matrix rows of a dumped DOM: (name, hidden), and the count line's text."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[tuple[str, bool]] = []
        self.count = ""
        self._in_count = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag == "tr" and "data-name" in found:
            self.rows.append((found["data-name"] or "", "hidden" in found))
        self._in_count = found.get("id") == "count"

    def handle_data(self, data: str) -> None:
        if self._in_count:
            self.count += data
            self._in_count = False


def _rows(dom: str) -> _Rows:
    parser = _Rows()
    parser.feed(dom)
    return parser


def test_screenshot_shows_the_matrix_and_its_marks(chromium: str, page: Path, tmp_path: Path) -> None:
    from PIL import Image

    png = screenshot(chromium, page, tmp_path / "page.png")
    assert png.stat().st_size > 30_000, "a page of text and tables compresses to more than this; blank?"
    with Image.open(png) as image:
        rgb = image.convert("RGB")
        assert rgb.size == (1400, 1000)
        colours = rgb.getcolors(maxcolors=1 << 20) or []
    assert len(colours) > 50, "a blank or single-colour screenshot"
    # Near, not equal: a colour profile may move a channel by a step or two.
    shaded = [n for n, colour in colours if all(abs(a - b) <= 4 for a, b in zip(colour, OTHER_RGB, strict=True))]
    assert sum(shaded) > 2000, "no differing cell (or zstd note) drawn"


def test_scripted_search_filters_rows(chromium: str, page: Path) -> None:
    everything = _rows(dump_dom(chromium, page))
    names = [name for name, _ in everything.rows]
    assert "torch" in names and "requests" in names and len(names) > 10
    assert not any(hidden for _, hidden in everything.rows)
    assert everything.count == f"{len(names)} of {len(names)} packages"

    torch = _rows(dump_dom(chromium, page, "?q=TORCH"))
    shown = [name for name, hidden in torch.rows if not hidden]
    assert shown == [name for name in names if "torch" in name] and shown  # pytorch, torch
    assert torch.count == f"{len(shown)} of {len(names)} packages"

    differ = _rows(dump_dom(chromium, page, "#q=torch%20lightning%20rich&differ=1"))
    # torch and conda's pytorch differ (2.3.0 / 2.4.0); lightning and rich are each in one image only.
    assert [name for name, hidden in differ.rows if not hidden] == ["pytorch", "torch"]
