"""Architecture is part of the target (pure): a build for a system whose nodes are aarch64 cannot be made on an
x86_64 machine (or the reverse), and a base of another architecture than the system's cannot be built on.

Checked before anything is downloaded, from the recipe's `architecture:`, the host's (HostFacts.machine) and,
for a local base, its SIF header or its programs (BaseSource.arch). There is no emulation override: apptainer
pulls the host's variant of multi-architecture docker images unless told otherwise, debootstrap needs its
two-stage --foreign mode for another architecture, and every pip/uv install would run under qemu emulation;
the fix is the system's own login node (or a lock made here, which needs no build: `envbuild lock`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from envbuild.host.arch import system_arch as target_arch
from envbuild.shared.errors import EnvbuildError

if TYPE_CHECKING:
    from envbuild.builder.plan.plandata import BuildRequest
    from envbuild.envspec.specmodel import Spec
    from envbuild.recipes.protocols import SystemRecipe


def architecture_problem(request: BuildRequest) -> tuple[str, str] | None:
    """(what, fix) when this build cannot make an image for its system here; None when it can."""
    return spec_architecture_problem(request.spec, request.recipe, host=request.facts.machine, base_arch=request.base.arch)


def spec_architecture_problem(spec: Spec, recipe: SystemRecipe, *, host: str, base_arch: str) -> tuple[str, str] | None:
    """architecture_problem from its parts: the spec, its recipe, this machine's and the local base's architectures."""
    target = target_arch(recipe, host)
    where = recipe.cite("architecture")
    if base_arch and base_arch != target:
        return (f"the base {spec.base.describe()} is {base_arch}, but system {recipe.name} runs {target} "
                f"({where}): an image on it would fail there with `exec format error`",
                f"give a base built for {target} (base: localimage:<a {target} .sif>, or a docker:// image that "
                f"has a linux/{target} variant), or name the system the image is for (system: in the spec)")
    if host and target != host:
        what = "an overlay" if spec.overlay is not None else "an image"
        lock = "" if spec.overlay is not None or spec.conda is not None else \
            f"; `envbuild lock` works here (it resolves for {target} without building)"
        return (f"system {recipe.name} runs {target} ({where}), but this machine is {host}: {what} built here "
                f"would hold {host} programs, which fail on {recipe.name}'s nodes with `exec format error`",
                f"build on an {target} machine ({recipe.name}'s login node: run the same envbuild build there), "
                f"with a base of that architecture{lock}")
    return None


def check_architecture(request: BuildRequest, source: str) -> None:
    """Raise before any download when the build cannot make an image for its system here (`source`: the spec's path)."""
    problem = architecture_problem(request)
    if problem is not None:
        raise EnvbuildError(f"{source}: {problem[0]}", problem[1])


def architecture_line(request: BuildRequest) -> str:
    """For --dry-run: `# target architecture: aarch64 (system roihu); this machine: aarch64`."""
    host = request.facts.machine
    target = target_arch(request.recipe, host)
    text = f"# target architecture: {target} (system {request.recipe.name})"
    if host:
        text += f"; this machine: {host}"
    if request.base.arch:
        text += f"; base: {request.base.arch}"
    return text + "\n"
