"""The PyTorch variant a spec builds: its own `python.pytorch.variant`, else its system recipe's
`pytorch.default_variant` (lumi-g: ROCm, roihu: CUDA 13.0, local: cpu), so that a spec for a GPU system
gets a torch that sees its GPUs without naming a variant. A `cpu` written for a GPU system is kept, with
a warning: it builds a torch that never sees the GPUs, which is seldom meant."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from envbuild.envspec.specmodel import PyTorch, Spec
from envbuild.shared.errors import SpecError, SpecProblem
from envbuild.shared.yamlsource import LocatedDocument

if TYPE_CHECKING:
    from envbuild.recipes.protocols import SystemRecipe

VARIANT_FIELD = ("python", "pytorch", "variant")


@dataclass(frozen=True)
class ChosenVariant:
    spec: Spec  # with the variant filled in from the recipe where the spec names none
    origin: str | None  # where the variant came from, in words; None without pytorch:
    warnings: tuple[SpecProblem, ...] = ()


def system_torch_variant(document: LocatedDocument, spec: Spec, recipe: SystemRecipe | None) -> ChosenVariant:
    """`recipe`: the one `system:` names (envbuild.envspec.loadspec loads it), None where it cannot be loaded."""
    pytorch = spec.python.pytorch
    if pytorch is None:
        return ChosenVariant(spec, None)
    if "variant" in pytorch.model_fields_set:
        pos = document.position_of(VARIANT_FIELD)
        origin = f"the spec ({document.file}:{pos.line})"
        return ChosenVariant(spec, origin, tuple(_cpu_on_gpus_warning(document, pytorch, recipe)))
    if recipe is None:  # an unknown system is reported with the spec's other problems; cpu meanwhile
        return ChosenVariant(spec, "PyTorch's cpu build (no system recipe to take a default from)")
    default = recipe.pytorch.default_variant
    origin = f"the {recipe.name} recipe's default_variant ({_recipe_line(recipe)})"
    try:
        chosen = PyTorch.model_validate({**pytorch.model_dump(exclude_unset=True), "variant": default})
    except ValueError as exc:
        pos = document.position_of(("python", "pytorch"))
        raise SpecError([SpecProblem(document.file, pos.line, pos.column, "python.pytorch",
                                     f"the {recipe.name} recipe's default_variant {default!r} is not a PyTorch "
                                     f"variant ({_recipe_line(recipe)}): {exc}",
                                     "write `variant:` here (cpu, cuda126, rocm6.4, ...), or fix the recipe")]) from None
    python = spec.python.model_copy(update={"pytorch": chosen})
    return ChosenVariant(spec.model_copy(update={"python": python}), origin)


def _recipe_line(recipe: SystemRecipe) -> str:
    """'recipes/lumi-g.yaml:LINE' (the cite without the field name)."""
    cite = recipe.cite("pytorch.default_variant")
    if cite.startswith("recipe "):  # no line: the recipe (a drafted one) leaves it to the schema's default
        return "not written in the recipe: the schema's default"
    return cite.rsplit(" ", 1)[0]


def _cpu_on_gpus_warning(document: LocatedDocument, pytorch: PyTorch, recipe: SystemRecipe | None) -> list[SpecProblem]:
    node = recipe.node if recipe is not None else None
    if recipe is None or pytorch.variant != "cpu" or node is None or not node.gpus:
        return []
    default = recipe.pytorch.default_variant
    pos = document.position_of(VARIANT_FIELD)
    better = (f"leave out `variant:` for the {recipe.name} recipe's default_variant {default} "
              f"({_recipe_line(recipe)})" if default != "cpu" else
              f"write the variant for its {node.gpu_vendor} GPUs (cuda<ver> or rocm<ver>)")
    return [SpecProblem(
        document.file, pos.line, pos.column, "python.pytorch.variant",
        f"variant cpu on {recipe.name}, whose nodes have {node.gpus} {node.gpu_vendor} GPUs: this torch never sees "
        "them (torch.cuda.is_available() is False) and training runs on the CPU",
        f"{better}; keep cpu only for an image that is meant to run without GPUs")]
