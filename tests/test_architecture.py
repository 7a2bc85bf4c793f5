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

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGE_DIR = REPO / "envbuild"

# Highest first: cli may import everything below it, store nothing but the shared leaves.
PACKAGE_ORDER = ("cli", "commands", "doctor", "catalogue", "verify", "slurm", "builder", "lock", "launch", "kernel",
                 "convert", "inventory", "sif", "envspec", "recipes", "host", "store", "imagetree", "report")
# The package any package may import: its modules import nothing of envbuild but each other.
SHARED_PACKAGE = "shared"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def all_modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(PACKAGE_DIR.rglob("*.py"))}


def imported_modules(name: str, path: Path, known: set[str], *, for_types: bool = True) -> set[str]:
    """The envbuild modules `name` imports anywhere in its file; `from pkg import mod` counts as pkg.mod.
    `for_types=False`: only those it imports where they run, not those under `if TYPE_CHECKING:`."""
    found: set[str] = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skipped = set() if for_types else _type_checking_nodes(tree)
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
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


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    """The nodes under `if TYPE_CHECKING:`: imports for annotations only, never run."""
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            skipped.update(id(inner) for statement in node.body for inner in ast.walk(statement))
    return skipped


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
    loose = [name for name in all_modules() if package_of(name) is None and name != "envbuild"]
    packages = {package_of(name) for name in all_modules()} - {None}
    assert loose == [], "a module outside every package: move it into the package of its concern (or shared/)"
    assert packages == {*PACKAGE_ORDER, SHARED_PACKAGE}


def test_packages_import_only_lower_packages() -> None:
    rank = {package: index for index, package in enumerate(PACKAGE_ORDER)}
    violations = []
    for module, imports in import_graph().items():
        own = package_of(module)
        for target in imports:
            theirs = package_of(target)
            if theirs == SHARED_PACKAGE or target == "envbuild":
                continue
            if own == SHARED_PACKAGE:
                violations.append(f"shared module {module} imports {target}")
            elif theirs != own and rank[theirs] <= rank[own]:
                violations.append(f"{module} ({own}) imports {target} ({theirs})")
    assert violations == [], "imports against the package order " + " > ".join(PACKAGE_ORDER) + ":\n" + "\n".join(sorted(violations))


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every cycle a depth-first walk of `graph` (node -> the nodes it points to) meets, each as a path."""
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        path.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == 1:
                cycles.append([*path[path.index(target):], target])
            elif target not in state:
                visit(target)
        path.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    return cycles


def test_no_import_cycles() -> None:
    cycles = find_cycles(import_graph())
    assert cycles == [], "import cycles:\n" + "\n".join(" -> ".join(cycle) for cycle in cycles)


# --- the CLI parses and prints ------------------------------------------------------------------------------
# A command's work is in envbuild.commands (one module per user command); envbuild.cli reads the options and
# prints what the command returns. So a CLI module imports from envbuild only the CLI, the commands, the shared
# leaves and the package root (the version). The exceptions: what a parser itself needs of a concern, each with it.
CLI_MAY_IMPORT = ("envbuild.cli", "envbuild.commands", f"envbuild.{SHARED_PACKAGE}")
CLI_IMPORT_EXCEPTIONS = {
    ("envbuild.cli.envbuild_main", "envbuild.sif.compression"):
        "--compression: its default (DEFAULT_COMPRESSION) shown in --help, its value checked as the option is read",
    ("envbuild.cli.sbatch_cmd", "envbuild.launch.args"): "--launcher: its choices (LAUNCHERS)",
    ("envbuild.cli.sweep_cmd", "envbuild.launch.args"): "--launcher: its choices (LAUNCHERS)",
    ("envbuild.cli.convert_cmds", "envbuild.convert.formats"): "--format: its choices and each one's help",
    ("envbuild.cli.envrun_main", "envbuild.launch.plancache"):
        "a repeat launch execs the plan kept for its command line before the commands and the errors load",
}


def cli_imports_of_concerns(modules: dict[str, Path]) -> set[tuple[str, str]]:
    """(CLI module, concern module) for each import of a concern package by a module of envbuild.cli."""
    known = set(modules)
    found = set()
    for name, path in modules.items():
        if name != "envbuild.cli" and not name.startswith("envbuild.cli."):
            continue
        for target in imported_modules(name, path, known):
            if target != "envbuild" and not target.startswith(tuple(f"{allowed}." for allowed in CLI_MAY_IMPORT)) \
                    and target not in CLI_MAY_IMPORT:
                found.add((name, target))
    return found


def test_the_cli_imports_only_the_commands_and_the_shared_leaves() -> None:
    found = cli_imports_of_concerns(all_modules())
    unexplained = sorted(found - set(CLI_IMPORT_EXCEPTIONS))
    assert unexplained == [], ("a CLI module imports a concern: move the work into envbuild.commands (or, for what "
                               "an option itself needs, name it in CLI_IMPORT_EXCEPTIONS with the reason):\n"
                               + "\n".join(f"{cli} imports {target}" for cli, target in unexplained))
    assert sorted(set(CLI_IMPORT_EXCEPTIONS) - found) == [], "an exception no longer needed: remove it"


def test_the_cli_rule_fails_on_a_cli_module_that_does_the_work(tmp_path: Path) -> None:
    thick = tmp_path / "thick.py"
    thick.write_text("from envbuild.commands import cache\nfrom envbuild.shared.errors import UsageError\n"
                     "from envbuild import __version__\n\ndef run():\n    from envbuild.store.entries import list_entries\n")
    modules = {"envbuild.cli.thick": thick, "envbuild.commands.cache": thick, "envbuild.shared.errors": thick,
               "envbuild.store.entries": thick, "envbuild": thick}
    assert cli_imports_of_concerns(modules) == {("envbuild.cli.thick", "envbuild.store.entries")}


# envrun's start-up path must stay light: these are what `envrun` must never load on the way to exec.
HEAVY_MODULES = ("pydantic", "yaml", "click", "dataclasses", "base64", "typing", "matplotlib", "numpy", "difflib")

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


def test_envrun_dry_run_with_the_lumi_binding_choice_imports_no_heavy_module(tmp_path: Path) -> None:
    """On a recipe with a newer binding (lumi-g) envrun reads srun's version and the image's torch: from the
    user's cache after the first launch (envbuild.launch.bindingfacts), so the second loads nothing heavy."""
    for command in (["srun", "python", "x.py"], ["srun", "torchrun", "x.py"]):
        dry_run_loads_nothing_heavy(tmp_path, ["--system", "lumi-g", "--image", "/etc/hostname", "--dry-run", *command])


def test_envrun_in_a_project_with_a_config_imports_no_heavy_module(tmp_path: Path) -> None:
    """The image from the project's envrun.yaml, binds and env from it and from the user's config: both
    files are validated once, then read back from their cache."""
    (tmp_path / "envrun.yaml").write_text("image: /etc/hostname\nbinds: [/tmp]\nenv: {HF_HOME: /tmp/hf}\n")
    (tmp_path / ".config" / "envbuild").mkdir(parents=True)
    (tmp_path / ".config" / "envbuild" / "envrun.yaml").write_text("env: {TORCH_HOME: /tmp/t}\n")
    dry_run_loads_nothing_heavy(tmp_path, ["--dry-run", "srun", "torchrun", "x.py"])


def test_envrun_with_a_recipe_file_imports_no_heavy_module(tmp_path: Path) -> None:
    """--system ./mysite.yaml (a drafted recipe): validated once, then read back from its cache like a named one."""
    recipe = (REPO / "recipes" / "puhti.yaml").read_text().replace("name: puhti", "name: mysite")
    (tmp_path / "mysite.yaml").write_text(recipe)
    dry_run_loads_nothing_heavy(tmp_path, ["--system", "./mysite.yaml", "--image", "/etc/hostname", "--dry-run", "srun",
                                           "python", "x.py"])


# What only some launches need, kept off the others: srun's version and the image's torch (a recipe's newer
# binding), accelerate/deepspeed's node launchers, the step time limit, the report's sampler and supervision.
SRUN_ONLY_MODULES = ("envbuild.launch.nodelaunchers", "envbuild.launch.steptime", "envbuild.shared.durations",
                     "envbuild.host.pythonstart", "envbuild.launch.supervise", "envbuild.report.stepreport")
BINDING_FACTS_MODULES = ("envbuild.launch.bindingfacts",)
# What a launch without overlays has no use for: the overlays' records and checks.
OVERLAY_MODULES = ("envbuild.launch.overlays",)
# What an exec without a failure has no use for besides: the escaping of an image's text for a terminal (an image's
# error message; a runscript verdict, cached once made). The dry run's script text needs it.
FAILURE_MODULES = ("envbuild.shared.terminaltext",)


def test_envrun_without_srun_loads_only_what_its_launch_uses(tmp_path: Path) -> None:
    """A launch on this node (no srun) on a recipe without the newer binding loads neither the step's modules
    (report sampler, time limit, supervision, node launchers) nor the binding facts, and one without overlays
    nothing of them."""
    for command in (["python", "x.py"], ["torchrun", "x.py"]):
        dry_run_loads_nothing_heavy(tmp_path, ["--system", "local", "--image", "/etc/hostname", "--dry-run", *command],
                                    heavy=(*HEAVY_MODULES, *SRUN_ONLY_MODULES, *BINDING_FACTS_MODULES, *OVERLAY_MODULES))


def test_envrun_under_srun_reads_binding_facts_only_for_a_recipe_that_needs_them(tmp_path: Path) -> None:
    """srun's version and the image's torch are read for lumi-g's binding choice only: on other recipes their
    module is not even loaded."""
    for command in (["srun", "python", "x.py"], ["srun", "torchrun", "x.py"]):
        dry_run_loads_nothing_heavy(tmp_path, ["--system", "local", "--image", "/etc/hostname", "--dry-run", *command],
                                    heavy=(*HEAVY_MODULES, *BINDING_FACTS_MODULES))


def dry_run_loads_nothing_heavy(tmp_path: Path, argv: list[str], heavy: tuple[str, ...] = HEAVY_MODULES) -> None:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path / "cache"),
           "ENVBUILD_CACHE_DIR": str(tmp_path / "cache" / "envbuild"), "PYTHONPATH": str(REPO)}
    reports = []
    for _ in range(2):  # the first run fills the recipe cache (pydantic may load); the second must not need it
        done = subprocess.run([sys.executable, "-c", DRY_RUN_LAUNCH, ",".join(heavy), json.dumps(argv)],
                              capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)
        reports.append(json.loads(done.stderr.strip().splitlines()[-1]))
    assert reports[1]["code"] in (0, None), reports
    assert reports[1]["heavy"] == [], f"envrun --dry-run loaded {reports[1]['heavy']}"


# The installed `envrun` (scripts/envrun, pyproject.toml's shared-scripts) runs as its installer writes it: the
# environment's Python, with site. Nothing of its own may load `re` (what pip's entry-point launcher imports)
# or a heavy module on the way to exec; what site loaded before the script's first line is not its doing.
INSTALLED_SCRIPT = REPO / "scripts" / "envrun"
INSTALLED_LAUNCH = """
import os, sys
HEAVY = sys.argv.pop(1).split(",")
before = set(sys.modules)  # json would load re: the words come as arguments and the report goes as repr
sys.argv = sys.argv[1:]
reached = []
def stop_at_exec(program, argv, env):  # what is loaded when envrun would exec the runtime
    reached.append(program)
    raise SystemExit(0)
os.execvpe = stop_at_exec
with open(sys.argv[0], encoding="utf-8") as handle:
    code = compile(handle.read(), sys.argv[0], "exec")
try:
    exec(code, {"__name__": "__main__", "__file__": sys.argv[0]})
except SystemExit as exc:
    exit_code = exc.code
else:
    exit_code = 0
print(repr({"code": exit_code, "reached": reached,
            "heavy": sorted(m for m in HEAVY if m in sys.modules and m not in before)}), file=sys.stderr)
"""


def test_the_installed_envrun_script_loads_no_re_and_nothing_heavy(tmp_path: Path) -> None:
    assert installed_script_loads(tmp_path, INSTALLED_SCRIPT) == []
    # the check sees `re` where a launcher loads it
    launcher = tmp_path / "entry-point-launcher"
    launcher.write_text("import re\nimport sys\nfrom envbuild.cli.envrun_main import main\nsys.exit(main())\n")
    assert installed_script_loads(tmp_path, launcher) == ["re"]


def installed_script_loads(tmp_path: Path, script: Path) -> list[str]:
    """Of `re`, HEAVY_MODULES and what a plain launch has no use for, what `script` loads on its way to exec (the
    second time, with the caches filled)."""
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path / "cache"),
           "ENVBUILD_CACHE_DIR": str(tmp_path / "cache" / "envbuild"), "PYTHONPATH": str(REPO)}
    argv = ["--image", "/etc/hostname", "--system", "local", "python", "x.py"]
    reports = []
    for _ in range(2):  # the first run fills the recipe cache (pydantic may load); the second must not need it
        unused = ("re", *HEAVY_MODULES, *SRUN_ONLY_MODULES, *BINDING_FACTS_MODULES, *OVERLAY_MODULES, *FAILURE_MODULES)
        done = subprocess.run([sys.executable, "-c", INSTALLED_LAUNCH, ",".join(unused), str(script),
                               *argv], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)
        reports.append(ast.literal_eval(done.stderr.strip().splitlines()[-1]))
    assert reports[1]["code"] in (0, None) and reports[1]["reached"], reports  # planned up to the exec
    heavy: list[str] = reports[1]["heavy"]
    return heavy


# A repeat launch execs the plan stored for its command line (envbuild.launch.plancache) after checking its facts:
# these modules only, none of the planner's.
CACHED_LAUNCH_MODULES = ("envbuild", "envbuild.launch", "envbuild.launch.plancache", "envbuild.host",
                         "envbuild.host.usercache")
LOADED_AT_EXEC = """
import os, sys
sys.path.insert(0, sys.argv.pop(1))
HEAVY = sys.argv.pop(1).split(",")
def stop_at_exec(program, argv, env):
    print(repr(sorted(m for m in sys.modules if m == "envbuild" or m.startswith("envbuild."))), file=sys.stderr)
    print(repr(sorted(m for m in HEAVY if m in sys.modules)), file=sys.stderr)
    os._exit(0)
os.execvpe = stop_at_exec
from envbuild.launch.plancache import exec_cached  # as bin/envrun and scripts/envrun start
exec_cached(sys.argv[1:])
from envbuild.cli.envrun_main import main
main()
"""


def loaded_at_exec(tmp_path: Path, argv: list[str], runs: int) -> list[tuple[list[str], list[str]]]:
    """(envbuild's modules, the heavy ones and `re`) loaded when envrun execs, in each of `runs` launches."""
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path / "cache"),
           "ENVBUILD_CACHE_DIR": str(tmp_path / "cache" / "envbuild")}
    loaded = []
    for _ in range(runs):
        done = subprocess.run([sys.executable, "-I", "-S", "-c", LOADED_AT_EXEC, str(REPO), ",".join(("re", *HEAVY_MODULES)),
                               *argv], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)
        lines = done.stderr.strip().splitlines()
        assert len(lines) >= 2, done.stderr
        loaded.append((ast.literal_eval(lines[-2]), ast.literal_eval(lines[-1])))
    return loaded


def test_a_launch_from_its_stored_plan_loads_only_the_cached_path(tmp_path: Path) -> None:
    """The first launch fills the caches (and asks the runtime its version: that plan is not stored), the second
    records and stores its plan (nothing heavy, no `re`), the third execs it without planning."""
    loaded = loaded_at_exec(tmp_path, ["--image", "/etc/hostname", "--system", "local", "python", "x.py"], runs=3)
    assert loaded[1][1] == [], f"recording the plan loaded {loaded[1][1]}"
    assert "envbuild.launch.planrecord" in loaded[1][0]
    assert loaded[2] == (sorted(CACHED_LAUNCH_MODULES), []), loaded[2]


def test_every_host_read_on_the_launch_path_is_recorded_for_the_stored_plan(tmp_path: Path) -> None:
    """A stored plan is checked against what its making read (envbuild.launch.planrecord): each os call of each
    module a plain launch loads must be one the recorder wraps or one it names as no fact; open() and
    io.open are wrapped; a program started is seen by the recorder's audit hook."""
    from envbuild.launch.planrecord import NO_FACT, RECORDED_OS_CALLS

    modules = all_modules()
    loaded = loaded_at_exec(tmp_path, ["--image", "/etc/hostname", "--system", "local", "python", "x.py"], runs=2)[1][0]
    unknown = []
    for name in loaded:
        if name in ("envbuild.launch.planrecord", "envbuild.launch.plancache"):
            continue  # the recorder and the checker themselves
        if name in ("envbuild.shared.safefiles", "envbuild.shared.treecopy"):
            continue  # loaded to write the user cache (usercache.write_cached): files that are no facts
        for where in io_done_by(modules[name]):
            line, what = where.split(": ", 1)
            call = what.removeprefix("os.").removesuffix("()")
            if what.startswith("os.") and what != "os.environ" and call not in RECORDED_OS_CALLS and call not in NO_FACT:
                unknown.append(f"{name}:{line}: {what}")
    assert unknown == [], ("os calls on the launch path that envbuild.launch.planrecord neither records nor names "
                           "in NO_FACT (a stored plan would not notice what they read):\n" + "\n".join(unknown))


def test_the_installed_envrun_is_the_script_not_an_entry_point() -> None:
    """pyproject.toml installs scripts/envrun as `envrun` with a Python shebang that hatchling rewrites (to
    `#!python`, then the installer to the environment's interpreter), and no entry point of that name."""
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    assert "envrun" not in project["project"]["scripts"]
    assert project["tool"]["hatch"]["build"]["targets"]["wheel"]["shared-scripts"] == {"scripts/envrun": "envrun"}
    first_line = INSTALLED_SCRIPT.read_text(encoding="utf-8").splitlines()[0]
    assert first_line == "#!/usr/bin/env python3"  # hatchling's rewrite matches `#!...python[0-9.]*`
    assert INSTALLED_SCRIPT.stat().st_mode & 0o111, "scripts/envrun must be executable"


# `envbuild packages` answered from its index must not load the CLI framework or the image reader either: the
# listing is meant to cost a stat per image (envbuild.cli.packages_entry, envbuild.inventory.inventorycache).
WARM_LISTING_HEAVY = (*HEAVY_MODULES, "json", "re", "hashlib", "envbuild.inventory.image", "envbuild.inventory.squashfs",
                      "envbuild.sif.reader", "envbuild.inventory.parallelread")

WARM_LISTING = """
import sys
HEAVY = sys.argv.pop(1).split(",")
sys.argv[0] = "envbuild"
from envbuild.cli.envbuild_entry import main
try:
    main()
except SystemExit as exc:
    code = exc.code
else:
    code = 0
print(repr({"code": code, "heavy": sorted(m for m in HEAVY if m in sys.modules)}), file=sys.stderr)
"""


def test_a_warm_envbuild_packages_imports_no_heavy_module(tmp_path: Path) -> None:
    images = [str(REPO / "tests/fixtures/inventory/layout-a.gzip.sif"), str(REPO / "tests/fixtures/inventory/layout-a.zstd.sif")]
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path / "cache"), "PYTHONPATH": str(REPO)}
    reports = []
    for _ in range(2):  # the first run reads the images and fills the index; the second answers from it
        done = subprocess.run([sys.executable, "-c", WARM_LISTING, ",".join(WARM_LISTING_HEAVY), "packages", "--grep",
                               "torch", *images],
                              capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)
        reports.append(ast.literal_eval(done.stderr.strip().splitlines()[-1]))
        assert "torch" in done.stdout, done.stderr
    assert "envbuild.inventory.image" in reports[0]["heavy"]  # the guard sees the reader when it is loaded
    assert reports[1]["code"] in (0, None), reports
    assert reports[1]["heavy"] == [], f"a warm envbuild packages loaded {reports[1]['heavy']}"


# --- the planners do no I/O ------------------------------------------------------------------------------------
# The pure side of the one-way flow (spec -> validated model -> pure plan -> thin executors): what these modules
# compute is data and text, golden-tested; reading the host and writing files is the executors' part.
# Every module of a package named here is a pure planner; so is each module named after them.
PURE_PACKAGES = ("envbuild.builder.plan",)
PURE_PLANNERS = (
    *(name for name in sorted(all_modules()) if name.startswith(tuple(f"{p}." for p in PURE_PACKAGES))),
    "envbuild.launch.launchplan", "envbuild.launch.sizing",
    "envbuild.slurm.batch.jobplan", "envbuild.slurm.batch.requeue", "envbuild.slurm.batch.resources",
    "envbuild.slurm.batch.script", "envbuild.slurm.batch.stepcommand",
    "envbuild.catalogue.cataloguedata", "envbuild.catalogue.page", "envbuild.catalogue.summary",
    "envbuild.slurm.sweep.metrics", "envbuild.slurm.sweep.points", "envbuild.slurm.sweep.sweepfiles",
    "envbuild.slurm.sweep.table", "envbuild.slurm.recipedraft",
)
# Packages that are executors or above them: a planner imports none of their modules.
EXECUTOR_PACKAGES = ("envbuild.builder.execute", "envbuild.builder.sessions", "envbuild.commands", "envbuild.verify", "envbuild.cli",
                     "envbuild.doctor")
# Modules a planner imports for their pure part although another part of them reads the host: each with what
# the planner takes from it. Shrink this list; never grow it without that reason.
MIXED_MODULES = {
    "envbuild.host.pip": "builder.plan.install: local_path_of, the host path behind a pip location (string work); the "
                         "reader of pip's configuration beside it reads the host",
    "envbuild.host.arch": "build.archcheck: system_arch, the recipe's architecture named as uname names it; "
                          "host_arch and the ELF reader beside it read this machine",
    "envbuild.host.node": "launch.plan: GPU_RUNTIME_FLAGS; read_host_node beside it reads the node's GPUs and CPUs, "
                          "one light module for envrun's start-up",
    "envbuild.sif.format": "build.squashplan: PARTITION_OFFSET; read_sif_arch beside it reads a SIF's 128-byte "
                           "header with struct only, for envrun's start-up",
    "envbuild.launch.allocation": "launch.sizing, slurm.batch.plan: read_allocation parses a job's variables; "
                                  "gpus_from_scontrol (one scontrol call) is called by commands/launch.py only",
    "envbuild.launch.runscript": "launch.plan: GPU_SWITCHES; image_runscript beside it reads the image's runscript "
                                 "(called by commands/launch.py)",
    "envbuild.launch.visibility": "launch.plan: check_visibility asks the host through the HostPaths the request "
                                  "brings (a test brings a table)",
    "envbuild.launch.overlays": "launch.plan: checked_overlays reads each overlay's record while planning (left: "
                                "to move into commands/launch.py with the request)",
    "envbuild.slurm.batch.staging": "slurm.batch.plan, slurm.batch.script: StageSource and the staging script "
                                    "text; describe_source (sizes, archive listings) is called by "
                                    "commands/sbatch.py only",
    "envbuild.inventory.imagefacts": "catalogue.model, catalogue.summary: the ImageFacts record, kept with "
                                "read_image_facts that fills it",
    "envbuild.store.entries": "catalogue.page: human_size; the store listing beside it reads the disk",
    "envbuild.slurm.cluster": "slurm.recipedraft: the parsers of scontrol's --oneliner text (parse_oneliners, "
                              "parse_nodes, parse_partitions, expand_hostlist); read_live_cluster and ask_at_once "
                              "beside them run scontrol, sacctmgr and sbatch",
}
# What counts as I/O in the source: these standard modules, open(), os's calls on files, processes and the
# environment, and the pathlib methods that touch the file system.
IO_STDLIB = frozenset({
    "subprocess", "shutil", "socket", "tempfile", "glob", "fcntl", "pty", "select", "ctypes", "mmap", "sqlite3",
    "zipfile", "tarfile", "gzip", "urllib", "http", "multiprocessing", "threading", "asyncio", "webbrowser",
})
OS_STRING_WORK = frozenset({  # os's names that only work on strings (expanduser: the spec's `~/` paths)
    "path.join", "path.basename", "path.dirname", "path.split", "path.splitext", "path.normpath", "path.isabs",
    "path.relpath", "path.commonpath", "path.expanduser", "fsencode", "fsdecode", "fspath", "strerror", "sep",
})
PATH_IO_METHODS = frozenset({
    "read_text", "read_bytes", "write_text", "write_bytes", "open", "iterdir", "glob", "rglob", "mkdir", "touch",
    "unlink", "rmdir", "exists", "is_file", "is_dir", "is_symlink", "lstat", "chmod", "symlink_to", "hardlink_to",
    "readlink", "samefile", "resolve",
})


def _dotted(node: ast.expr) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))


def io_done_by(path: Path) -> list[str]:
    """Where the source of `path` does I/O, as `line: what` (imports under TYPE_CHECKING do not count)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skipped = _type_checking_nodes(tree)
    found = []
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found += [f"{node.lineno}: import {a.name}" for a in node.names if a.name.split(".")[0] in IO_STDLIB]
        elif isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] in IO_STDLIB:
            found.append(f"{node.lineno}: from {node.module} import")
        elif isinstance(node, ast.Attribute) and _dotted(node) == "os.environ":
            found.append(f"{node.lineno}: os.environ")
        elif isinstance(node, ast.Call):
            name = _dotted(node.func)
            if name == "open":
                found.append(f"{node.lineno}: open()")
            elif name.startswith("os.") and name != "os.environ.get" and name[3:] not in OS_STRING_WORK:
                found.append(f"{node.lineno}: {name}()")
            elif isinstance(node.func, ast.Attribute) and node.func.attr in PATH_IO_METHODS:
                found.append(f"{node.lineno}: .{node.func.attr}()")
    return sorted(set(found), key=lambda text: int(text.split(":")[0]))


def test_the_pure_planners_do_no_io() -> None:
    modules = all_modules()
    assert set(PURE_PLANNERS) <= set(modules), "a planner named here was moved: " + ", ".join(set(PURE_PLANNERS) - set(modules))
    problems = [f"{name}:{where}" for name in PURE_PLANNERS for where in io_done_by(modules[name])]
    assert problems == [], "I/O in a pure planner (move it to the executor side):\n" + "\n".join(problems)


def test_the_pure_planners_import_no_executor() -> None:
    modules = all_modules()
    known = set(modules)
    problems = []
    for name in PURE_PLANNERS:
        for target in sorted(imported_modules(name, modules[name], known, for_types=False)):
            if target.startswith(tuple(f"{package}." for package in EXECUTOR_PACKAGES)) or target in EXECUTOR_PACKAGES:
                problems.append(f"{name} imports the executor {target}")
            elif target not in MIXED_MODULES and (io := io_done_by(modules[target])):
                problems.append(f"{name} imports {target}, which does I/O ({'; '.join(io[:3])})")
    assert problems == [], "\n".join(problems)


def test_the_mixed_modules_still_do_io_and_are_imported_by_a_planner() -> None:
    """A module that lost its I/O, or that no planner imports any more, leaves MIXED_MODULES."""
    modules = all_modules()
    known = set(modules)
    imported = set().union(*(imported_modules(name, modules[name], known, for_types=False) for name in PURE_PLANNERS))
    stale = [name for name in MIXED_MODULES if name not in imported or not io_done_by(modules[name])]
    assert stale == []


def test_the_io_reader_sees_each_kind_of_io(tmp_path: Path) -> None:
    source = tmp_path / "sample.py"
    source.write_text("import subprocess\nfrom shutil import copy\nimport os\nif TYPE_CHECKING:\n    import socket\n"
                      "def f(p):\n    open(p)\n    os.stat(p)\n    os.path.join(p, 'x')\n    p.read_text()\n"
                      "    os.environ['A']\n    return 'a'.replace('a', 'b')\n", encoding="utf-8")
    assert io_done_by(source) == ["1: import subprocess", "2: from shutil import", "7: open()", "8: os.stat()",
                                  "10: .read_text()", "11: os.environ"]


# --- one home for file effects (issue 40) --------------------------------------------------------------------
# Every write, rename, unlink, rmtree and mkdir in a place others may write goes through envbuild/shared/safefiles.py. A raw one
# anywhere else fails here, unless its module is listed below with the reason it is safe.
FILE_EFFECT_HOME = "envbuild/shared/safefiles.py"
FILE_EFFECTS_ALLOWED = {
    "envbuild/imagetree/intree.py": "writes inside an image tree only through descriptors resolved within its root, "
                                    "one O_NOFOLLOW component at a time (openat2's RESOLVE_IN_ROOT done by hand)",
    "envbuild/sif/writer.py": "runs as the build's helper process in the build's work directory (held under its work "
                              "lock) and writes the output's partial, whose name carries the build's random id; the "
                              "objects directory it makes is made before it runs by the plan's MakeDirs, from the "
                              "store's work/ down by descriptor (a link planted there refused)",
    "envbuild/sif/layeredwriter.py": "as envbuild/sif/writer.py: the staging tree is the build's own work directory",
}
# mkdir and makedirs too: a directory made by path follows a link another member planted on the way, and what the
# build then writes in it lands in the link's target; chmod and chown by path change what a link points at.
_OS_EFFECTS = {"replace", "rename", "renames", "unlink", "remove", "rmdir", "removedirs", "symlink", "link", "truncate",
               "mkdir", "makedirs", "chmod", "chown", "lchown", "mknod", "mkfifo"}
_SHUTIL_EFFECTS = {"rmtree", "move", "copy", "copy2", "copyfile", "copytree"}
_PATH_EFFECTS = {"write_text", "write_bytes", "unlink", "rmdir", "symlink_to", "hardlink_to", "touch", "mkdir", "chmod"}


def raw_file_effects(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, what) of each call that writes, renames or removes a file other than through envbuild.shared.safefiles."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Attribute):
            owner = func.value.id if isinstance(func.value, ast.Name) else None
            if owner == "os" and func.attr in _OS_EFFECTS:
                found.append((node.lineno, f"os.{func.attr}"))
            elif owner == "shutil" and func.attr in _SHUTIL_EFFECTS:
                found.append((node.lineno, f"shutil.{func.attr}"))
            elif owner not in ("os", "shutil", "safefiles") and func.attr in _PATH_EFFECTS:
                found.append((node.lineno, f".{func.attr}()"))
            elif owner != "safefiles" and func.attr in ("rename", "replace") and len(node.args) == 1 and not node.keywords:
                found.append((node.lineno, f".{func.attr}()"))  # Path.rename/replace (str.replace takes two)
            elif func.attr == "open" and _opens_for_writing(node, 0):
                found.append((node.lineno, ".open() for writing"))
            elif owner == "os" and func.attr == "open" and _creates(node):
                found.append((node.lineno, "os.open(O_CREAT/O_WRONLY/O_RDWR/O_TRUNC)"))
        elif isinstance(func, ast.Name):
            if func.id == "open" and _opens_for_writing(node, 1) and not _through_safefiles(node.args[0]):
                found.append((node.lineno, "open() for writing"))
            elif func.id in _SHUTIL_EFFECTS:
                found.append((node.lineno, func.id))
    return found


def _through_safefiles(argument: ast.expr) -> bool:
    """open(safefiles.open_append(path), "a"): the descriptor was opened by the safe layer."""
    return (isinstance(argument, ast.Call) and isinstance(argument.func, ast.Attribute)
            and isinstance(argument.func.value, ast.Name) and argument.func.value.id == "safefiles")


def _creates(call: ast.Call) -> bool:
    flags = {node.attr for argument in call.args[1:2] for node in ast.walk(argument) if isinstance(node, ast.Attribute)}
    return bool(flags & {"O_CREAT", "O_WRONLY", "O_RDWR", "O_TRUNC", "O_APPEND"})


def _opens_for_writing(call: ast.Call, position: int) -> bool:
    mode = call.args[position] if len(call.args) > position else None
    for keyword in call.keywords:
        if keyword.arg == "mode":
            mode = keyword.value
    return isinstance(mode, ast.Constant) and isinstance(mode.value, str) and any(c in mode.value for c in "wax+")


def test_file_effects_have_one_home() -> None:
    offenders = []
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        relative = path.relative_to(REPO).as_posix()
        if relative == FILE_EFFECT_HOME or relative in FILE_EFFECTS_ALLOWED:
            continue
        offenders += [f"{relative}:{line}: {what}" for line, what in raw_file_effects(ast.parse(path.read_text(encoding="utf-8")))]
    assert not offenders, ("write, rename and remove files through envbuild.shared.safefiles (or list the module in "
                           "FILE_EFFECTS_ALLOWED with the reason it is safe):\n" + "\n".join(offenders))


def test_the_file_effect_detector_sees_each_raw_form() -> None:
    """The guard must be able to fail: each form it looks for, written out, is found."""
    source = "\n".join([
        "os.replace(a, b)", "os.unlink(a)", "shutil.rmtree(a)", "Path(a).write_text(t)", "p.unlink()",
        "p.rename(q)", "open(a, 'w')", "open(a, mode='ab')", "p.open('w')", "rmtree(a)", "os.symlink(a, b)",
        "os.open(a, os.O_WRONLY | os.O_CREAT, 0o600)", "os.makedirs(a, exist_ok=True)", "os.mkdir(a, 0o700)",
        "Path(a).mkdir(parents=True)", "os.chmod(a, 0o755)", "Path(a).chmod(0o600)",
    ])
    assert len(raw_file_effects(ast.parse(source))) == 17
    safe = "\n".join(["safefiles.write_file(a, t)", "s.replace('a', 'b')", "open(a)", "open(a, 'rb')", "p.read_text()",
                      "open(safefiles.open_append(a), 'a')", "os.open(a, os.O_RDONLY | os.O_NOFOLLOW)",
                      "safefiles.make_dirs(a)", "tempfile.mkdtemp()"])
    assert raw_file_effects(ast.parse(safe)) == []


def test_the_allowed_modules_exist_and_still_need_their_place() -> None:
    for relative in FILE_EFFECTS_ALLOWED:
        path = REPO / relative
        assert path.exists(), f"{relative} is listed in FILE_EFFECTS_ALLOWED but is gone"
        assert raw_file_effects(ast.parse(path.read_text(encoding="utf-8"))), f"{relative} no longer needs its exception"
