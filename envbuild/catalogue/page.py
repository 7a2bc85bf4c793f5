"""The catalogue as one static HTML page (pure): the images with their facts, then the packages x images
matrix with a search box. Style and script are inlined (envbuild.catalogue.pageassets); every text from
an image (paths, labels, versions, records) goes through html.escape, attributes included."""

from __future__ import annotations

import json
from html import escape

from envbuild.catalogue.cataloguedata import Catalogue, Cell, PackageLine
from envbuild.catalogue.pageassets import SCRIPT, STYLE
from envbuild.catalogue.summary import ImageSummary
from envbuild.store.entries import human_size

JSON_NAME = "catalogue.json"  # written beside the page; linked from it
COLUMNS = ("Image", "Type", "Size", "Compression", "Runs on", "Base", "Build", "Python environments", "Labels")


def e(value: object) -> str:
    return escape(str(value), quote=True)


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def _kv(items: dict[str, str]) -> str:
    return '<dl class="kv">' + "".join(f"<dt>{e(k)}</dt><dd>{e(v)}</dd>" for k, v in items.items()) + "</dl>"


def _build_cell(image: ImageSummary) -> str:
    if not image.build:
        return '<span class="note">not built by envbuild</span>'
    build = image.build
    spec = build.get("spec", "?") + (f" ({build['system']})" if build.get("system") else "")
    headline = f"{spec}, {build['built']}" if build.get("built") else spec
    details = _kv(build)
    if image.build_record:
        details += f"<pre>{e(json.dumps(image.build_record, indent=2, sort_keys=True))}</pre>"
    return f"{e(headline)}<details><summary>record</summary>{details}</details>"


def _environments_cell(image: ImageSummary) -> str:
    if not image.environments:
        text = '<span class="note">none found</span>'
    else:
        items = []
        for env in image.environments:
            python = f" {env.python}" if env.python else ""
            items.append(f"<li><code>{e(env.prefix)}</code> {e(env.kind)}{e(python)}, {e(env.packages)}</li>")
        summary = f"{_plural(len(image.environments), 'environment')}, {_plural(image.packages, 'package')}"
        text = f'<details><summary>{e(summary)}</summary><ul class="envs">{"".join(items)}</ul></details>'
    if image.problems:
        problems = "".join(f"<li>{e(p)}</li>" for p in image.problems)
        text += (f'<details class="warn"><summary>{e(_plural(len(image.problems), "problem"))}</summary>'
                 f"<ul>{problems}</ul></details>")
    return text


def _labels_cell(image: ImageSummary) -> str:
    if not image.labels:
        return '<span class="note">none</span>'
    return f"<details><summary>{e(_plural(len(image.labels), 'label'))}</summary>{_kv(image.labels)}</details>"


def _image_row(image: ImageSummary) -> str:
    name = f'<td class="image"><strong>{e(image.label)}</strong><div class="path">{e(image.path)}</div></td>'
    if image.error:
        return f'<tr class="error">{name}<td colspan="{len(COLUMNS) - 1}">could not be read: {e(image.error)}</td></tr>'
    kind = f"{image.kind} {image.arch}".strip()
    size = human_size(image.size) if image.size is not None else "directory"
    runtime_class = "runtime limited" if image.runtime_limited else "runtime"
    cells = [
        name,
        f'<td class="nowrap">{e(kind)}</td>',
        f'<td class="num" title="{e(image.size if image.size is not None else "")} bytes">{e(size)}</td>',
        f"<td class=\"nowrap\">{e(image.compression or '-')}</td>",
        f'<td class="{runtime_class}">{e(image.runtime or "-")}</td>',
        f'<td class="base">{e(image.base or "-")}</td>',
        f'<td class="build">{_build_cell(image)}</td>',
        f'<td class="nowrap">{_environments_cell(image)}</td>',
        f'<td class="nowrap">{_labels_cell(image)}</td>',
    ]
    return "<tr>" + "".join(cells) + "</tr>"


def _images_table(catalogue: Catalogue) -> str:
    head = "".join(f"<th>{e(c)}</th>" for c in COLUMNS)
    body = "\n".join(_image_row(image) for image in catalogue.images)
    return f'<table class="images">\n<thead><tr>{head}</tr></thead>\n<tbody>\n{body}\n</tbody>\n</table>'


def _cell(cell: Cell) -> str:
    where = "\n".join(f"{env}: {version} ({source})" for env, version, source in cell.where)
    title = f' title="{e(where)}"' if where else ""
    return f'<td class="mono {cell.state}"{title}>{e(cell.text)}</td>'


def _package_row(line: PackageLine) -> str:
    marks = ' class="differs"' if line.differs else ""
    return f'<tr data-name="{e(line.key)}"{marks}><th>{e(line.name)}</th>{"".join(_cell(c) for c in line.cells)}</tr>'


def _matrix(catalogue: Catalogue) -> str:
    if not catalogue.columns:
        return '<p class="note">No image could be read: no packages to show.</p>'
    head = "".join(f'<th title="{e(path)}">{e(label)}</th>'
                   for path, label in zip(catalogue.columns, catalogue.column_labels(), strict=True))
    body = "\n".join(_package_row(line) for line in catalogue.packages)
    differing = sum(1 for line in catalogue.packages if line.differs)
    partial = sum(1 for line in catalogue.packages if not line.everywhere)
    total = len(catalogue.packages)
    return (
        f'<p class="note">{e(_plural(total, "package"))}: {e(differing)} with different versions across the images, '
        f"{e(partial)} not in every image. Versions of one image's environments are joined by \",\"; hover a cell "
        "for where each is installed."
        '<span class="legend"><span class="other">differs from the most common</span>'
        '<span class="absent">absent</span></span></p>\n'
        '<div class="controls"><input id="q" type="search" placeholder="filter packages, e.g. torch numpy" '
        'aria-label="filter packages" autocomplete="off">'
        '<label><input id="differ" type="checkbox"> only packages whose versions differ</label>'
        f'<span id="count">{e(total)} of {e(total)} packages</span></div>\n'
        f'<div class="matrix-wrap"><table id="matrix">\n<thead><tr><th>Package</th>{head}</tr></thead>\n'
        f"<tbody>\n{body}\n</tbody>\n</table></div>\n"
        '<p id="none" class="note" hidden>No package matches the filter.</p>'
    )


def render_page(catalogue: Catalogue) -> str:
    images = _plural(len(catalogue.images), "image")
    failed = f", {catalogue.failed} could not be read" if catalogue.failed else ""
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f'<meta name="generator" content="envbuild {e(catalogue.envbuild_version)}">\n'
        f"<title>{e(catalogue.title)}</title>\n<style>\n{STYLE}</style>\n</head>\n<body>\n"
        f"<h1>{e(catalogue.title)}</h1>\n"
        f'<p class="meta">{e(images)}{e(failed)}, {e(_plural(len(catalogue.packages), "package"))}; read from the files '
        f"(no container started) by envbuild {e(catalogue.envbuild_version)} at {e(catalogue.generated_at)}. "
        f'Data: <a href="{JSON_NAME}">{JSON_NAME}</a></p>\n'
        f'<h2 id="images">Images</h2>\n{_images_table(catalogue)}\n'
        f'<h2 id="packages">Python packages</h2>\n{_matrix(catalogue)}\n'
        f"<script>\n{SCRIPT}</script>\n</body>\n</html>\n"
    )
