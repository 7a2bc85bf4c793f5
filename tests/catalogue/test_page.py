"""The catalogue page (pure): golden HTML of the sample catalogue, escaping, nothing fetched from outside.
Regenerate after an intended change with ENVBUILD_UPDATE_GOLDEN=1 pytest tests/catalogue/test_page.py and
review the diff."""

from __future__ import annotations

import re
from html.parser import HTMLParser

from envbuild.catalogue.cataloguedata import build_catalogue
from envbuild.catalogue.page import render_page
from tests.support.catalogue_samples import sample_catalogue, sample_entries
from tests.support.golden import check_golden

GOLDEN_NAME = "catalogue-sample.html"


def golden_names() -> set[str]:
    return {GOLDEN_NAME}


def test_page_matches_golden() -> None:
    check_golden(GOLDEN_NAME, render_page(sample_catalogue()))


class _Collect(HTMLParser):
    """Every start tag with its attributes, and the text of the page."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def _parse(page: str) -> _Collect:
    parser = _Collect()
    parser.feed(page)
    parser.close()
    return parser


def test_text_from_images_is_escaped_and_survives_as_text() -> None:
    page = render_page(sample_catalogue())
    assert "<script>alert(1)</script>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    parsed = _parse(page)
    text = "".join(parsed.text)
    assert 'say "hi" & <script>alert(1)</script>' in text  # the label, as it is, for the reader
    assert "/appl/images/<odd>.sif" in text and "LUMI images & <friends>" in text
    assert [tag for tag, _ in parsed.tags].count("script") == 1  # only the page's own


def test_a_path_with_quotes_cannot_leave_its_attribute() -> None:
    entries = sample_entries()
    evil = '/x/"><img src=x onerror=alert(1)>.sif'
    entries[0] = type(entries[0])(evil, entries[0].facts)
    page = render_page(build_catalogue(entries, generated_at="now", envbuild_version="0"))
    assert not any(tag == "img" for tag, _ in _parse(page).tags)
    heads = [attrs.get("title") for tag, attrs in _parse(page).tags if tag == "th" and attrs.get("title")]
    assert evil in heads


def test_nothing_is_fetched_from_elsewhere() -> None:
    page = render_page(sample_catalogue())
    for tag, attrs in _parse(page).tags:
        assert "src" not in attrs, tag
        if tag == "link":
            raise AssertionError("no stylesheets or icons to fetch")
        if tag == "a":
            assert attrs["href"] == "catalogue.json"
    assert not re.search(r"https?://", page.replace("docker://", ""))
    assert "@import" not in page and "url(" not in page


def test_rows_carry_what_the_filter_needs() -> None:
    parsed = _parse(render_page(sample_catalogue()))
    rows = [attrs for tag, attrs in parsed.tags if tag == "tr" and "data-name" in attrs]
    assert [r["data-name"] for r in rows] == ["accelerate", "lightning", "numpy", "pytorch", "torch"]
    assert [r["data-name"] for r in rows if "differs" in (r.get("class") or "")] == ["torch"]
    cells = [attrs.get("class") for tag, attrs in parsed.tags if tag == "td" and "mono" in (attrs.get("class") or "")]
    assert cells.count("mono other") == 2 and cells.count("mono absent") == 6


def test_zstd_is_marked_with_its_runtime_requirement_and_the_bad_file_has_its_row() -> None:
    page = render_page(sample_catalogue())
    assert '<td class="runtime limited">zstd images run only on apptainer &gt;= 1.4.0' in page
    assert '<tr class="error">' in page and "could not be read: not a SIF image" in page


def test_a_catalogue_without_readable_images_still_renders() -> None:
    entries = [e for e in sample_entries() if e.facts is None]
    page = render_page(build_catalogue(entries, generated_at="now", envbuild_version="0"))
    assert "No image could be read" in page and 'id="matrix"' not in page
