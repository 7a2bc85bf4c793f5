"""A base image with venv overlays mounted on it (`envbuild packages BASE --overlay X.sqsh ...`), from
the inventories of the files alone (pure).

The overlay's venv lists what its Python sees (`pip list` inside the container), in the order the site
module puts them on sys.path, the first of a name winning:
  1. the overlay's own site-packages;
  2. the directories `_envbuild_base.pth` names (the base environment's, e.g. /opt/venv's): a venv made
     from a venv's Python sees only the underlying interpreter through --system-site-packages;
  3. with include-system-site-packages, the site of the interpreter pyvenv.cfg's `home` belongs to.
Inherited packages carry the source "pip (base PREFIX)", so a user sees where each comes from; an
overlay package that hides one of the base says so: "pip (hides PREFIX VERSION)".
"""

from __future__ import annotations

import posixpath

from envbuild.inventory.overlayvenv import OverlayVenv
from envbuild.inventory.pkgmeta import canonical_name
from envbuild.inventory.pyenvs import Environment, Inventory, Package, Problem
from envbuild.shared.errors import ImageFormatError
from envbuild.shared.overlayformat import BASE_PTH


def combined_label(base: str, overlays: list[str]) -> str:
    """The name of the combination in tables and JSON: "base.sif + x.sqsh + y.sqsh"."""
    return " + ".join([base, *overlays])


def require_overlay(path: str, inventory: Inventory) -> OverlayVenv:
    """The overlay facts of an inventory given with --overlay; ImageFormatError when the file is none."""
    if inventory.overlay is None:
        raise ImageFormatError(path, "is not a venv overlay made by envbuild (it has no overlay record)",
                               "--overlay takes the .sqsh file `envbuild build` wrote for a spec with an overlay: section")
    return inventory.overlay


def base_mismatch(base_path: str, base_sif_id: str | None, overlay_path: str, venv: OverlayVenv) -> Problem | None:
    """Why the overlay may not be made for this base (its record names another SIF id), or None when it is.
    Listing is reading, not running: a mismatch is shown as a warning and the listing goes on."""
    made_for = f"made for {venv.base_ref or 'an unnamed base'}"
    if base_sif_id is None:
        return Problem(overlay_path, f"{made_for}; {base_path} is not a SIF file, so that cannot be checked")
    if not venv.base_sif_id:
        return Problem(overlay_path, f"{made_for}; its record has no SIF id to check {base_path} against")
    if venv.base_sif_id != base_sif_id:
        return Problem(overlay_path, f"{made_for} (SIF id {venv.base_sif_id}), not for {base_path} (SIF id "
                                     f"{base_sif_id}): its packages were installed against another base; "
                                     "rebuild it for this one (envbuild build SPEC) before running it there")
    return None


def _system_prefixes(home: str) -> list[str]:
    """Prefixes whose site directories the interpreter in `home` (its bin directory) puts on sys.path."""
    prefix = posixpath.dirname(posixpath.normpath(home)) if home else ""
    if not prefix:
        return []
    # Debian and Ubuntu patch site.py: /usr's Python also reads /usr/local/lib/python3.X/dist-packages, first.
    return ["/usr/local", "/usr"] if prefix == "/usr" else [prefix]


def _inherited_environments(seen: list[Environment], venv: OverlayVenv, overlay_path: str, base_label: str,
                            problems: list[Problem]) -> list[Environment]:
    """The environments below the overlay whose pip packages its Python sees, in sys.path order."""
    by_site = {site: env for env in seen for site in env.site_dirs}
    by_prefix = {env.prefix: env for env in seen}
    pth = f"{overlay_path}:{venv.mount}/lib/python{venv.python}/site-packages/{BASE_PTH}"
    sources: list[Environment] = []
    for site in venv.base_site_dirs:
        # The walk does not follow symlinks, so a venv's lib64 -> lib is known by its lib path only.
        env = by_site.get(site) or by_site.get(site.replace("/lib64/", "/lib/"))
        if env is None:
            problems.append(Problem(pth, f"names {site}, which {base_label} does not have: the overlay's "
                                         "Python misses the packages it was built against"))
            continue
        if env.python and venv.python and env.python != venv.python:
            problems.append(Problem(pth, f"names {site} of Python {env.python}; the overlay's venv is Python {venv.python}"))
        if env not in sources:
            sources.append(env)
    if venv.system_site:
        for prefix in _system_prefixes(venv.home):
            env = by_prefix.get(prefix)
            # A venv's prefix is never an interpreter's home: Python would look past it for the real one.
            if env is not None and env.kind != "venv" and env not in sources:
                sources.append(env)
    return sources


def _installed_there(package: Package) -> bool:
    """A pip distribution in its environment's own site directories (not one an overlay's venv inherits)."""
    return package.source == "pip" or package.source.startswith("pip (hides ")


def _venv_packages(own: list[Package], inherited_from: list[Environment], seen: list[Package], mount: str) -> list[Package]:
    inherited: dict[str, Package] = {}
    for env in inherited_from:
        for package in seen:
            if package.environment == env.prefix and _installed_there(package):
                inherited.setdefault(canonical_name(package.name), package)
    result = []
    own_names = set()
    for package in own:
        hidden = inherited.get(canonical_name(package.name)) if package.source == "pip" else None
        if package.source == "pip":
            own_names.add(canonical_name(package.name))
        if hidden is not None:
            package = Package(package.environment, package.name, package.version,
                              f"pip (hides {hidden.environment} {hidden.version})")
        result.append(package)
    result += [Package(mount, p.name, p.version, f"pip (base {p.environment})")
               for name, p in inherited.items() if name not in own_names]
    return result


def overlaid_inventory(base_path: str, base: Inventory, base_sif_id: str | None,
                       overlays: list[tuple[str, Inventory]]) -> Inventory:
    """The environments and packages of `base` with `overlays` (path, inventory) mounted in order; a
    later overlay at the same mount point hides an earlier one, as the later bind does in the container."""
    environments, packages = list(base.environments), list(base.packages)
    problems = list(base.problems)
    below = base_path
    for path, overlay in overlays:
        venv = require_overlay(path, overlay)
        mismatch = base_mismatch(base_path, base_sif_id, path, venv)
        if mismatch is not None:
            problems.append(mismatch)
        hidden = [e for e in environments if e.prefix == venv.mount or e.prefix.startswith(venv.mount + "/")]
        for env in hidden:
            problems.append(Problem(path, f"mounted at {venv.mount}, it hides the environment {env.prefix} of {below}"))
        environments = [e for e in environments if e not in hidden]
        hidden_prefixes = {e.prefix for e in hidden}
        packages = [p for p in packages if p.environment not in hidden_prefixes]
        sources = _inherited_environments(environments, venv, path, below, problems)
        own = [p for p in overlay.packages if p.environment == venv.mount]
        others = [p for p in overlay.packages if p.environment != venv.mount]
        packages += _venv_packages(own, sources, packages, venv.mount) + others
        environments += overlay.environments
        problems += [Problem(f"{path}:{p.path}", p.message) for p in overlay.problems]
        below = combined_label(below, [path])
    return Inventory(environments=sorted(environments, key=lambda e: e.prefix), packages=sorted(set(packages)),
                     problems=problems)
