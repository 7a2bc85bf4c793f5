"""The package layering of envbuild, checked from the source with `ast` (nothing is imported).

Every import counts: module level, inside functions, and under TYPE_CHECKING, because each of them is a
dependency someone has to understand. A package imports only the packages after it in PACKAGE_ORDER,
plus the shared leaves; no two modules import each other, directly or through others.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGE_DIR = REPO / "envbuild"

# Highest first: cli may import everything below it, store nothing but the shared leaves.
PACKAGE_ORDER = ("cli", "app", "doctor", "catalogue", "slurm", "build", "lock", "launch", "inventory", "sif", "spec",
                 "recipes", "host", "store", "imagetree")
# Modules any package may import: they import nothing of envbuild but each other.
SHARED_LEAVES = ("envbuild", "envbuild.errors", "envbuild.yamlsource", "envbuild.treedigest", "envbuild.atomicfile",
                 "envbuild.strictmodel", "envbuild.overlayformat", "envbuild.interrupts",
                 "envbuild.terminaltext", "envbuild.shelltext", "envbuild.envnames", "envbuild.durations")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def all_modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(PACKAGE_DIR.rglob("*.py"))}


def imported_modules(name: str, path: Path, known: set[str]) -> set[str]:
    """The envbuild modules `name` imports anywhere in its file; `from pkg import mod` counts as pkg.mod."""
    found: set[str] = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            found.add(target)
            found.update(f"{target}.{alias.name}" for alias in node.names if f"{target}.{alias.name}" in known)
    return {module for module in found if module in known and module != name}


def import_graph() -> dict[str, set[str]]:
    modules = all_modules()
    known = set(modules)
    return {name: imported_modules(name, path, known) for name, path in modules.items()}


def package_of(module: str) -> str | None:
    parts = module.split(".")  # envbuild.<package>.<module>, or envbuild.<package> for its __init__
    if len(parts) > 2 or (len(parts) == 2 and (PACKAGE_DIR / parts[1]).is_dir()):
        return parts[1]
    return None


def test_every_module_belongs_to_a_package_or_is_a_shared_leaf() -> None:
    loose = [name for name in all_modules() if package_of(name) is None and name not in SHARED_LEAVES]
    packages = {package_of(name) for name in all_modules()} - {None}
    assert loose == []
    assert packages == set(PACKAGE_ORDER)


def test_packages_import_only_lower_packages() -> None:
    rank = {package: index for index, package in enumerate(PACKAGE_ORDER)}
    violations = []
    for module, imports in import_graph().items():
        own = package_of(module)
        for target in imports:
            theirs = package_of(target)
            if target in SHARED_LEAVES:
                continue
            if own is None:
                violations.append(f"shared leaf {module} imports {target}")
            elif theirs != own and rank[theirs] <= rank[own]:
                violations.append(f"{module} ({own}) imports {target} ({theirs})")
    assert violations == [], "imports against the package order " + " > ".join(PACKAGE_ORDER) + ":\n" + "\n".join(sorted(violations))


def test_no_import_cycles() -> None:
    graph = import_graph()
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(module: str) -> None:
        state[module] = 1
        path.append(module)
        for target in sorted(graph[module]):
            if state.get(target) == 1:
                cycles.append([*path[path.index(target):], target])
            elif target not in state:
                visit(target)
        path.pop()
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module)
    assert cycles == [], "import cycles:\n" + "\n".join(" -> ".join(cycle) for cycle in cycles)


# envrun's start-up path must stay light: these are what `envrun` must never load on the way to exec.
HEAVY_MODULES = ("pydantic", "yaml", "click", "dataclasses", "base64", "typing", "matplotlib", "numpy")

DRY_RUN_LAUNCH = """
import json, sys
from envbuild.cli import envrun_main
HEAVY = sys.argv[1].split(",")
try:
    envrun_main.main(json.loads(sys.argv[2]))
except SystemExit as exc:
    code = exc.code
else:
    code = 0
print(json.dumps({"code": code, "heavy": sorted(m for m in HEAVY if m in sys.modules)}), file=sys.stderr)
"""


def test_envrun_dry_run_imports_no_heavy_module(tmp_path: Path) -> None:
    dry_run_loads_nothing_heavy(tmp_path, ["--image", "/etc/hostname", "--dry-run", "srun", "torchrun", "x.py"])


def test_envrun_dry_run_of_the_other_node_launchers_imports_no_heavy_module(tmp_path: Path) -> None:
    """srun accelerate launch / srun deepspeed (envbuild.launch.nodelaunchers): their world_info and options are
    made by shell text in the step, so nothing heavier than torchrun's plan is loaded."""
    for command in (["srun", "-N", "2", "accelerate", "launch", "x.py"], ["srun", "deepspeed", "--num_gpus=1", "x.py"]):
        dry_run_loads_nothing_heavy(tmp_path, ["--image", "/etc/hostname", "--dry-run", *command])


def test_envrun_in_a_project_with_a_config_imports_no_heavy_module(tmp_path: Path) -> None:
    """The image from the project's envrun.yaml, binds and env from it and from the user's config: both
    files are validated once, then read back from their cache."""
    (tmp_path / "envrun.yaml").write_text("image: /etc/hostname\nbinds: [/tmp]\nenv: {HF_HOME: /tmp/hf}\n")
    (tmp_path / ".config" / "envbuild").mkdir(parents=True)
    (tmp_path / ".config" / "envbuild" / "envrun.yaml").write_text("env: {TORCH_HOME: /tmp/t}\n")
    dry_run_loads_nothing_heavy(tmp_path, ["--dry-run", "srun", "torchrun", "x.py"])


def dry_run_loads_nothing_heavy(tmp_path: Path, argv: list[str]) -> None:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path / "cache"),
           "ENVBUILD_CACHE_DIR": str(tmp_path / "cache" / "envbuild"), "PYTHONPATH": str(REPO)}
    reports = []
    for _ in range(2):  # the first run fills the recipe cache (pydantic may load); the second must not need it
        done = subprocess.run([sys.executable, "-c", DRY_RUN_LAUNCH, ",".join(HEAVY_MODULES), json.dumps(argv)],
                              capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)
        reports.append(json.loads(done.stderr.strip().splitlines()[-1]))
    assert reports[1]["code"] in (0, None), reports
    assert reports[1]["heavy"] == [], f"envrun --dry-run loaded {reports[1]['heavy']}"
