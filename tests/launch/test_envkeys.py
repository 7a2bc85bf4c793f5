"""Variable names and where `env:` goes (issue 28). A name is letters, digits and _ not starting with a digit,
matched in full (a trailing newline is no name), in every file envrun and envbuild read: the envrun config, a
project's envrun.yaml, a recipe, a spec. A bad one is a located error with a fix, never a script line or a
traceback. The config's and project's env go into the container only: APPTAINERENV_NAME, escaped for
apptainer's evaluation of those values, never NAME in the environment of srun or apptainer on the host."""

from __future__ import annotations

from pathlib import Path

import pytest

from envbuild.host.buildhost import Runtime
from envbuild.launch.config import read_settings
from envbuild.launch.launchplan import LaunchRequest, plan_launch
from envbuild.recipes.loadrecipe import load_recipe, recipes_dir, validate_recipe_file
from envbuild.shared.envnames import is_env_name, shell_evaluated_literally
from envbuild.shared.errors import SpecError, UsageError
from tests.cli.test_envrun_main import envrun, refused
from tests.launch.test_plan import HOST

BAD_NAMES = ["A;B", "FOO\n", "1X", "A-B", "A B", "$(id)", "", "X=Y", "É"]
FIX = "fix: write the name with letters, digits and _, not starting with a digit (e.g. HF_HOME)"


@pytest.fixture(autouse=True)
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


@pytest.mark.parametrize("name", BAD_NAMES)
def test_a_bad_name_is_no_name(name: str) -> None:
    assert not is_env_name(name)


def test_good_names() -> None:
    assert all(is_env_name(name) for name in ("HF_HOME", "_x", "a1", "LD_PRELOAD", "if"))


def yaml_key(name: str) -> str:
    return '"' + name.encode("unicode_escape").decode().replace('"', '\\"') + '"'


@pytest.mark.parametrize("name", ["A;B", "FOO\n", "1X"])
@pytest.mark.parametrize(("layout", "where"), [
    ("env:\n  {key}: x\n", "2:3: env"),
    ("systems:\n  lumi-g:\n    env:\n      {key}: x\n", "4:7: systems.lumi-g.env"),
])
def test_config_and_project_file_names_are_located(tmp_path: Path, name: str, layout: str, where: str) -> None:
    path = tmp_path / "envrun.yaml"
    path.write_text(layout.format(key=yaml_key(name)))
    for project in (False, True):
        with pytest.raises(UsageError) as caught:
            read_settings(str(path), project=project)
        assert caught.value.render().splitlines() == [
            f"error: {path}:{where}: {name!r} is not a valid environment variable name "
            "(letters, digits and _, not starting with a digit)", f"  {FIX}"]


@pytest.mark.parametrize("name", ["A;B", "FOO\n"])
def test_envrun_refuses_a_bad_name_without_a_script_or_a_traceback(tmp_path: Path, name: str) -> None:
    """The issue's report: a key with `;` or a newline landed in the --dry-run script, and a real launch died
    with a traceback."""
    config = tmp_path / "config.yaml"
    config.write_text(f"env:\n  {yaml_key(name)}: x\n")
    image = tmp_path / "env.sif"
    image.write_text("x")
    env = {"HOME": str(tmp_path), "ENVRUN_CONFIG": str(config), "ENVRUN_IMAGE": "", "ENVBUILD_SYSTEM": "local"}
    for dry_run in (["--dry-run"], []):
        lines = refused(envrun(["--image", str(image), *dry_run, "true"], env))
        assert lines[0].startswith(f"error: {config}:2:3: env: {name!r} is not a valid environment variable name")
        assert lines[1:] == [f"  {FIX}"]


def test_a_recipe_with_a_bad_name_is_located(tmp_path: Path) -> None:
    from envbuild.shared.yamlsource import load_yaml_file

    text = (recipes_dir() / "local.yaml").read_text() + 'env:\n  "A;B": x\n'
    path = tmp_path / "local.yaml"
    path.write_text(text)
    with pytest.raises(UsageError) as caught:
        validate_recipe_file(path, "local", load_yaml_file(path))
    line = len(text.splitlines())
    assert caught.value.message == (f"{path}:{line}:3: env: 'A;B' is not a valid environment variable name "
                                    "(letters, digits and _, not starting with a digit)")


@pytest.mark.parametrize("name", ["FOO\n", "A;B"])
def test_a_spec_with_a_bad_name_is_located(tmp_path: Path, name: str) -> None:
    """re.match with `$` took "FOO\\n": every start of the image then ran `export FOO` and `=x: not found`."""
    from envbuild.envspec.loadspec import load_spec

    spec = tmp_path / "spec.yaml"
    spec.write_text(f"name: x\nbase: debootstrap:bookworm\npython: {{packages: []}}\nenv:\n  {yaml_key(name)}: x\n")
    with pytest.raises(SpecError) as caught:
        load_spec(spec, check_host=False)
    [problem] = caught.value.problems
    assert (problem.line, problem.column, problem.hint) == (5, 3, FIX[len("fix: "):])
    assert "\n" not in problem.field


# -- where env: goes --------------------------------------------------------------------------------------------


def plan_with(env: dict[str, str], *, environ: dict[str, str] | None = None, runtime: str = "apptainer",
              runscript: str = "", command: tuple[str, ...] = ("srun", "python", "x.py")):
    return plan_launch(LaunchRequest(
        command=command, image="/img/env.sif", recipe=load_recipe("local"), runtime=Runtime(f"/usr/bin/{runtime}", runtime),
        cwd="/work/proj", env=tuple(env.items()), environ=environ or {}, host=HOST, runscript=runscript))


def test_the_projects_env_goes_into_the_container_only() -> None:
    plan = plan_with({"LD_PRELOAD": "/evil.so", "HF_HOME": "/scratch/hf"})
    names = [name for name, _ in plan.env]
    assert "LD_PRELOAD" not in names and "HF_HOME" not in names, "nothing of the project's env on the host"
    assert ("APPTAINERENV_LD_PRELOAD", "/evil.so") in plan.env and ("APPTAINERENV_HF_HOME", "/scratch/hf") in plan.env
    assert "export LD_PRELOAD" not in plan.script()
    singularity = plan_with({"HF_HOME": "/h"}, runtime="singularity")
    assert ("SINGULARITYENV_HF_HOME", "/h") in singularity.env


def test_a_variable_the_caller_already_sets_keeps_its_value() -> None:
    assert plan_with({"HF_HOME": "/cfg"}, environ={"HF_HOME": "/mine"}).env == plan_with({}, environ={"HF_HOME": "/mine"}).env
    assert plan_with({"HF_HOME": "/cfg"}, environ={"APPTAINERENV_HF_HOME": "/m"}).env == \
        plan_with({}, environ={"APPTAINERENV_HF_HOME": "/m"}).env


def test_values_are_escaped_for_apptainers_evaluation_unless_no_eval() -> None:
    value = "a $HOME `id` $(id) \\ \"q\" 's'\nend"
    escaped = dict(plan_with({"X": value}).env)["APPTAINERENV_X"]
    assert escaped == shell_evaluated_literally(value) == "a \\$HOME \\`id\\` \\$(id) \\\\ \"q\" 's'\nend"
    no_eval = plan_with({"X": value}, runscript="its runscript runs its arguments", command=("python", "x.py"))
    assert dict(no_eval.env)["APPTAINERENV_X"] == value, "`run --no-eval` passes the value as it is"


def test_a_bad_name_given_to_the_planner_directly_is_refused() -> None:
    with pytest.raises(UsageError, match="'A;B' is not a valid environment variable name"):
        plan_with({"A;B": "x"})
