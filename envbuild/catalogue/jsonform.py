"""The catalogue as JSON (pure): the page's data for scripts, `catalogue.json` beside `index.html`."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

from envbuild.catalogue.model import Catalogue

# Bump when a key changes meaning or goes away (adding keys does not bump it).
CATALOGUE_FORMAT = 1


def catalogue_to_dict(catalogue: Catalogue) -> dict[str, Any]:
    images = []
    for image in catalogue.images:
        entry = asdict(image)
        entry["error"] = image.error or None
        entry["environments"] = [asdict(env) for env in image.environments]
        entry["problems"] = list(image.problems)
        images.append(entry)
    packages = []
    for line in catalogue.packages:
        packages.append({
            "name": line.name,
            "key": line.key,
            "differs": line.differs,  # the images that have it do not all have the same version(s)
            "in_every_image": line.everywhere,
            # Per image path: the cell as shown, its mark, and where each copy is installed.
            "images": {
                path: {"versions": cell.text, "state": cell.state,
                       "where": [{"environment": env, "version": version, "source": source}
                                 for env, version, source in cell.where]}
                for path, cell in zip(catalogue.columns, line.cells, strict=True)
            },
        })
    return {
        "catalogue_format": CATALOGUE_FORMAT,
        "title": catalogue.title,
        "generated_at": catalogue.generated_at,
        "envbuild_version": catalogue.envbuild_version,
        "images": images,
        "columns": list(catalogue.columns),
        "packages": packages,
    }


def render_json(catalogue: Catalogue) -> str:
    return json.dumps(catalogue_to_dict(catalogue), indent=2) + "\n"
