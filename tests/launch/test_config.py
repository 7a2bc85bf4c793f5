"""envrun's config file (envbuild.launch.config): where it is looked for, what it gives per system, and
each kind of bad file refused with file:line:column, what is wrong and a fix (exit status 2)."""

from __future__ import annotations

import typing
from pathlib import Path

import pytest

from envbuild.launch.args import LAUNCHERS
from envbuild.launch.config import config_path, load_envrun_config
from envbuild.launch.configschema import BatchDefaults, EnvrunConfig, SystemSettings
from envbuild.shared.errors import UsageError

CONFIG = """\
binds: [/scratch/data, /projappl/models]
env:
  HF_HOME: /scratch/hf-cache
  OMP_PROC_BIND: "true"
systems:
  lumi-g:
    binds: [/flash/proj]
    env: {HF_HOME: /flash/hf, TORCH_HOME: /flash/torch}
"""


def test_config_path_order() -> None:
    assert config_path({"ENVRUN_CONFIG": "/x/c.yaml", "XDG_CONFIG_HOME": "/xdg", "HOME": "/h"}) == "/x/c.yaml"
    assert config_path({"ENVRUN_CONFIG": "", "XDG_CONFIG_HOME": "/xdg", "HOME": "/h"}) == "/xdg/envbuild/envrun.yaml"
    assert config_path({"HOME": "/h"}) == "/h/.config/envbuild/envrun.yaml"


def test_no_config_file_is_an_empty_config(tmp_path: Path) -> None:
    assert load_envrun_config({"HOME": str(tmp_path)}) == EnvrunConfig()


def test_the_default_file_is_read(tmp_path: Path) -> None:
    path = tmp_path / ".config/envbuild/envrun.yaml"
    path.parent.mkdir(parents=True)
    path.write_text("binds: [/d]\n")
    assert load_envrun_config({"HOME": str(tmp_path)}).binds == ("/d",)


def test_global_and_per_system_settings_merge(tmp_path: Path) -> None:
    path = tmp_path / "envrun.yaml"
    path.write_text(CONFIG)
    config = load_envrun_config({"ENVRUN_CONFIG": str(path)})
    assert config.for_system("lumi-g") == SystemSettings(
        binds=("/scratch/data", "/projappl/models", "/flash/proj"),
        env={"HF_HOME": "/flash/hf", "OMP_PROC_BIND": "true", "TORCH_HOME": "/flash/torch"},
    )
    assert config.for_system("local") == SystemSettings(binds=("/scratch/data", "/projappl/models"),
                                                        env={"HF_HOME": "/scratch/hf-cache", "OMP_PROC_BIND": "true"})


def test_an_empty_file_is_an_empty_config(tmp_path: Path) -> None:
    path = tmp_path / "envrun.yaml"
    path.write_text("# nothing yet\n")
    assert load_envrun_config({"ENVRUN_CONFIG": str(path)}) == EnvrunConfig()


def refusal(tmp_path: Path, text: str | None) -> UsageError:
    path = tmp_path / "envrun.yaml"
    if text is not None:
        path.write_text(text)
    with pytest.raises(UsageError) as caught:
        load_envrun_config({"ENVRUN_CONFIG": str(path)})
    assert caught.value.exit_code == 2
    return caught.value


@pytest.mark.parametrize(("text", "message", "fix"), [
    ("binds: [/a]\nenv:\n  HF_HOME: 3\n", "3:3: env.HF_HOME: Input should be a valid string", "envrun --help"),
    ("bind: [/a]\n", "1:1: bind: Extra inputs are not permitted", "envrun --help"),
    ("systems:\n  lumi-g:\n    env:\n      T: [1]\n", "4:7: systems.lumi-g.env.T: Input should be a valid string", "envrun --help"),
    ("systems:\n  lumi-g:\n    mounts: [/x]\n", "3:5: systems.lumi-g.mounts: Extra inputs are not permitted", "envrun --help"),
    ("- /a\n- /b\n", "1:1: envrun config: must be a mapping with binds, env and systems, not a list", "envrun --help"),
    ("binds: [/a\n", "2:1: envrun config: YAML syntax: expected ',' or ']', but got '<stream end>'", "check indentation"),
    ("env: {A: x}\nenv: {B: y}\n", "2:1: envrun config: YAML syntax: duplicate key 'env' (key 'env' first given on line 1)",
     "keep one of the two"),
])
def test_bad_config_is_located_with_a_fix(tmp_path: Path, text: str, message: str, fix: str) -> None:
    error = refusal(tmp_path, text)
    assert error.message == f"{tmp_path / 'envrun.yaml'}:{message}"
    assert error.hint and fix in error.hint
    assert "spec" not in error.render(), "the config file is not a spec"


def test_envrun_config_naming_a_missing_file_is_refused(tmp_path: Path) -> None:
    error = refusal(tmp_path, None)
    assert error.message == f"ENVRUN_CONFIG names {tmp_path / 'envrun.yaml'}, which does not exist"
    assert error.hint == "fix or unset ENVRUN_CONFIG"


def test_envrun_config_naming_a_directory_is_refused(tmp_path: Path) -> None:
    (tmp_path / "envrun.yaml").mkdir()
    error = refusal(tmp_path, None)
    assert error.message == f"{tmp_path / 'envrun.yaml'}: is a directory, not envrun's config file"
    assert error.hint and "ENVRUN_CONFIG" in error.hint


def test_the_config_accepts_exactly_the_launchers_envrun_knows() -> None:
    """The schema spells the launchers out for the type checker; envbuild.launch.args.LAUNCHERS is their home."""
    launcher_type = typing.get_args(BatchDefaults.model_fields["launcher"].annotation)[0]
    assert typing.get_args(launcher_type) == LAUNCHERS
