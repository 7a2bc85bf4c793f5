"""envrun's optional configuration: data directories to bind and variables such as HF_HOME/TORCH_HOME,
globally or per system. File: $ENVRUN_CONFIG, else ~/.config/envbuild/envrun.yaml.

    binds: [/scratch/project_465000000/data]
    env: {HF_HOME: /scratch/project_465000000/hf-cache}
    systems:
      lumi-g: {env: {TORCH_HOME: /flash/project_465000000/torch}}
"""

from __future__ import annotations

import os
from types import SimpleNamespace

from envbuild.errors import SpecError, UsageError

TYPE_CHECKING = False  # pathlib and typing stay off envrun's start-up path
if TYPE_CHECKING:
    from collections.abc import Mapping

    from envbuild.launch.configschema import EnvrunConfig

# What an absent config means; a plain object so that envrun needs no pydantic for it.
EMPTY = SimpleNamespace(binds=(), env={})


def config_path(environ: Mapping[str, str]) -> str:
    if environ.get("ENVRUN_CONFIG"):
        return environ["ENVRUN_CONFIG"]
    base = environ.get("XDG_CONFIG_HOME") or os.path.join(environ.get("HOME") or os.path.expanduser("~"), ".config")
    return os.path.join(base, "envbuild", "envrun.yaml")


def load_envrun_config(environ: Mapping[str, str] | None = None) -> EnvrunConfig:
    from pathlib import Path

    from pydantic import ValidationError

    from envbuild.launch.configschema import EnvrunConfig
    from envbuild.yamlsource import load_yaml_file

    environ = os.environ if environ is None else environ
    path = Path(config_path(environ))
    if not path.exists():
        if environ.get("ENVRUN_CONFIG"):
            raise UsageError(f"ENVRUN_CONFIG names {path}, which does not exist", "fix or unset ENVRUN_CONFIG")
        return EnvrunConfig()
    if path.is_dir():
        raise UsageError(f"{path}: is a directory, not envrun's config file", _FIX_PATH)
    try:
        document = load_yaml_file(path)
    except SpecError as exc:  # YAML syntax or a duplicate key: located, but this is no spec
        problem = exc.problems[0]
        raise UsageError(f"{problem.file}:{problem.line}:{problem.column}: envrun config: {problem.message}",
                         problem.hint) from None
    if document.data is not None and not isinstance(document.data, dict):
        raise UsageError(f"{path}:1:1: envrun config: must be a mapping with binds, env and systems, "
                         f"not a {type(document.data).__name__}", _FIX_FORMAT)
    try:
        return EnvrunConfig.model_validate(document.data or {})
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = tuple(first["loc"])
        pos = document.position_of(loc)
        raise UsageError(f"{path}:{pos.line}:{pos.column}: {'.'.join(map(str, loc))}: {first['msg']}", _FIX_FORMAT) from None


_FIX_FORMAT = "see `envrun --help` for the config format"
_FIX_PATH = "point ENVRUN_CONFIG at a YAML file, or unset it to use ~/.config/envbuild/envrun.yaml"
