"""What a recipe computes (wheel index, citations, usable cores), shared by the
validated pydantic model and the light view that envrun loads from the JSON cache.

Kept free of pydantic and YAML on purpose: envrun's start-up must stay far below the container's own
start-up time, and importing pydantic alone would exceed that budget.
"""

from __future__ import annotations

TYPE_CHECKING = False  # neither typing nor re on envrun's start-up path
if TYPE_CHECKING:
    from typing import Any

    from envbuild.recipes.protocols import SystemRecipe


def parse_core_list(text: str | int) -> tuple[int, ...]:
    """'1-7' -> (1..7); '0,2,4-5' -> (0, 2, 4, 5); 3 (YAML's one core) -> (3,)."""
    import re

    cores: list[int] = []
    for part in str(text).split(","):
        part = part.strip()
        if not re.fullmatch(r"\d+(-\d+)?", part):
            raise ValueError(f"{text!r} is not a core list like '1-7' or '0,2,4-5'")
        low, _, high = part.partition("-")
        cores.extend(range(int(low), int(high or low) + 1))
    return tuple(cores)


def cores_to_mask(cores: tuple[int, ...], width: int) -> str:
    """Cores -> srun's mask_cpu hex form, zero-padded to the node's core count: (1..7), 64 -> 0x00000000000000fe."""
    value = sum(1 << core for core in cores)
    return f"0x{value:0{max(1, (width + 3) // 4)}x}"


class NodeMethods:
    usable_cores: int | None
    cores: int

    @property
    def usable(self) -> int:
        return self.usable_cores or self.cores


class RecipeMethods:
    # self is typed by what the methods read: the mixin of the model (schema.Recipe) and of its view (RecipeView)
    def pytorch_index_for(self: SystemRecipe, wheel_tag: str) -> str | None:
        """The wheel index URL for a PyTorch variant, or None when the host's pip configuration decides."""
        if self.pytorch.index == "host":
            return None
        return self.pytorch.index.replace("{tag}", wheel_tag)

    def cite(self: SystemRecipe, field: str) -> str:
        """Where a setting comes from: 'recipes/lumi-g.yaml:27 node.gpu_cores' (line when known)."""
        source = getattr(self, "source", None) or {}
        path = source.get("file")
        line = source.get("lines", {}).get(field)
        if path and line:
            parts = path.rsplit("/", 2)
            return f"{'/'.join(parts[-2:])}:{line} {field}"
        return f"recipe {getattr(self, 'name', '?')}: {field}"


def system_argument(recipe: SystemRecipe) -> str:
    """The --system value that names `recipe` to another envrun (a batch job's, a doctor's step): its file where
    it was given as one (--system ./mysite.yaml), else its name."""
    source = getattr(recipe, "source", None) or {}
    file: str | None = source.get("file") if source.get("given_as_path") else None
    return file or recipe.name


# --- the light view ---------------------------------------------------------------------------------

MODEL_KEY = "__model__"
SOURCE_KEY = "__source__"  # {"file": path, "lines": {"node.gpu_cores": 27, ...}, "given_as_path": True (--system FILE)}


class View:
    """Read-only attribute access over a validated, JSON-dumped model."""

    def __init__(self, data: dict[str, Any]) -> None:
        for key, value in data.items():
            if key not in (MODEL_KEY, SOURCE_KEY):
                object.__setattr__(self, key, from_cached(value))

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("recipe views are read-only")


class NodeView(View, NodeMethods):
    def __init__(self, data: dict[str, Any]) -> None:
        super().__init__(data)
        # JSON object keys are strings; GPU indexes are ints in the model.
        object.__setattr__(self, "gpu_cores", {int(k): tuple(v) for k, v in data.get("gpu_cores", {}).items()})


class RecipeView(View, RecipeMethods):
    def __init__(self, data: dict[str, Any]) -> None:
        super().__init__(data)
        object.__setattr__(self, "source", data.get(SOURCE_KEY, {}))


_VIEWS = {"Node": NodeView, "Recipe": RecipeView}


def from_cached(value: Any) -> Any:
    if isinstance(value, dict):
        if MODEL_KEY in value:
            return _VIEWS.get(value[MODEL_KEY], View)(value)
        return {key: from_cached(item) for key, item in value.items()}
    if isinstance(value, list):
        return tuple(from_cached(item) for item in value)
    return value
