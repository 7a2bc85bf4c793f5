"""`envrun recipe draft`: a starting system recipe for this cluster, from what its Slurm says
(envbuild.slurm.draftfacts reads, envbuild.slurm.recipedraft plans), checked with the recipe loader's own
validation before it is printed or written, so that `envrun --system FILE` takes it as it is."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from envbuild.shared.errors import EXIT_CLEAN, EnvbuildError, UsageError


def run_recipe_draft(*, output: str | None, force: bool, partition: str | None, environ: Mapping[str, str]) -> int:
    """Draft the recipe; print it (no output) or write it to `output` (refused where a file is, unless force)."""
    from envbuild.recipes.loadrecipe import RECIPE_SUFFIXES
    from envbuild.slurm.draftfacts import read_draft_input
    from envbuild.slurm.recipedraft import plan_draft

    name = None
    if output is not None and output != "-":
        if os.path.lexists(output) and not force:
            raise UsageError(f"{output} exists", "pass --force to replace it, or give another -o FILE")
        base = os.path.basename(output)
        name = next((base[: -len(suffix)] for suffix in RECIPE_SUFFIXES if base.endswith(suffix)), None)
        if not name:
            raise UsageError(f"-o {output}: a recipe file's name ends in .yaml",
                             f"e.g. -o {base or 'mysite'}.yaml (the file's name is the recipe's name)")
    draft = plan_draft(read_draft_input(name=name, partition=partition, environ=environ))
    check_draft(draft.text, draft.name)
    for note in draft.notes:
        print(f"envrun recipe draft: {note}", file=sys.stderr)
    if output is None or output == "-":
        sys.stdout.write(draft.text)
        return EXIT_CLEAN
    from envbuild.shared.safefiles import write_file

    write_file(output, draft.text)
    shown = output if "/" in output else f"./{output}"
    print(f"envrun recipe draft: wrote {output} (recipe {draft.name}); review it, then use it with "
          f"`envrun --system {shown} ...` or ENVBUILD_SYSTEM={os.path.abspath(output)}", file=sys.stderr)
    return EXIT_CLEAN


def check_draft(text: str, name: str) -> None:
    """The draft through the strict loader's validation: a draft it refused would be a bug here, said as one."""
    from pydantic import ValidationError

    from envbuild.recipes.schema import Recipe
    from envbuild.shared.yamlsource import parse_yaml_text

    try:
        recipe = Recipe.model_validate(parse_yaml_text(text, f"{name}.yaml").data)
    except (ValidationError, UsageError) as exc:
        raise EnvbuildError(f"the drafted recipe does not validate: {exc}",
                            "report it with the output of `scontrol show partition --oneliner` and "
                            "`scontrol show node --oneliner`") from None
    if recipe.name != name:
        raise EnvbuildError(f"the drafted recipe is named {recipe.name!r}, not {name!r}")
