"""`envbuild inspect` and `envbuild diff`: an image's facts read from its file (labels, start scripts, record,
spec and lock, partitions, Python environments; an overlay's record), shown for one image or compared between
two. One module: both are the same reading (envbuild.inventory.imagefacts, its inventory remembered) shown two
ways."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from envbuild.inventory.inventorycache import InventoryCache

if TYPE_CHECKING:
    from typing import TextIO


def inspect_image(image: str, *, as_json: bool, no_cache: bool, err: TextIO) -> str:
    """IMAGE's facts as text (or JSON); what went wrong reading parts of it is said on `err`."""
    from envbuild.inventory.inspect_report import inspect_to_dict, render_inspect
    from envbuild.inventory.listing import problem_warnings

    facts = InventoryCache(enabled=not no_cache).facts(image)
    err.write(problem_warnings(image, facts.inventory))
    return json.dumps(inspect_to_dict(facts), indent=2) + "\n" if as_json else render_inspect(facts)


def compare_images(image_a: str, image_b: str, *, as_json: bool, no_cache: bool) -> str:
    """What changed from IMAGE_A to IMAGE_B, as text (or JSON)."""
    from envbuild.inventory.diff import diff_images, diff_to_dict, render_diff

    cache = InventoryCache(enabled=not no_cache)
    result = diff_images(cache.facts(image_a), cache.facts(image_b))
    return json.dumps(diff_to_dict(result), indent=2) + "\n" if as_json else render_diff(result)
