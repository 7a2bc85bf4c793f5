"""envrun's optional configuration: data directories to bind and variables such as HF_HOME/TORCH_HOME,
globally or per system. File: $ENVRUN_CONFIG, else ~/.config/envbuild/envrun.yaml.

    binds: [/scratch/project_465000000/data]
    env: {HF_HOME: /scratch/project_465000000/hf-cache}
    systems:
      lumi-g: {env: {TORCH_HOME: /flash/project_465000000/torch}}

The user's own config may also list `trusted_dirs:`, directories whose envrun.yaml envrun obeys even though
another user owns or may write it (a group project that really shares one, envbuild.launch.trust).

A project's envrun.yaml (envbuild.launch.project) has the same keys plus `image` and `overlays`.
envrun reads both through `read_settings`: validated (YAML + pydantic) only when the file changed, else
read back from the user's own cache (envbuild.host.usercache) keyed by the file's content, like the
recipes (envbuild.recipes.loadrecipe), and checked there to have the shape validation gives.

Both files' `env:` goes into the container only (envbuild.launch.launchplan passes it as APPTAINERENV_*), never
into the environment of the host processes envrun starts (srun, apptainer): a project's file cannot make
them load a library (LD_PRELOAD) or find other programs. The user's own config is the user's, but is
treated the same, so that one rule says where `env:` goes; variables the host needs come from envrun.
"""

from __future__ import annotations

import os

from envbuild.host.usercache import MISS, content_cache_name, is_text_list, read_cached, write_cached
from envbuild.shared.envnames import ENV_NAME_FIX, is_env_name
from envbuild.shared.errors import SpecError, UsageError

TYPE_CHECKING = False  # pathlib and typing stay off envrun's start-up path
if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path
    from typing import Any, TypeVar

    from envbuild.launch.configschema import EnvrunConfig
    from envbuild.shared.strictmodel import StrictModel

    Model = TypeVar("Model", bound=StrictModel)

# Bump when the cached data's layout changes, so older cache files are not read.
CACHE_FORMAT = 3


def config_path(environ: Mapping[str, str]) -> str:
    if environ.get("ENVRUN_CONFIG"):
        return environ["ENVRUN_CONFIG"]
    base = environ.get("XDG_CONFIG_HOME") or os.path.join(environ.get("HOME") or os.path.expanduser("~"), ".config")
    return os.path.join(base, "envbuild", "envrun.yaml")


def load_envrun_config(environ: Mapping[str, str] | None = None) -> EnvrunConfig:
    from pathlib import Path

    from envbuild.launch.configschema import EnvrunConfig

    environ = os.environ if environ is None else environ
    path = Path(config_path(environ))
    if not path.exists():
        if environ.get("ENVRUN_CONFIG"):
            raise UsageError(f"ENVRUN_CONFIG names {path}, which does not exist", "fix or unset ENVRUN_CONFIG")
        return EnvrunConfig()
    if path.is_dir():
        raise UsageError(f"{path}: is a directory, not envrun's config file", _FIX_PATH)
    return validate_file(path, EnvrunConfig, "envrun config", "binds, env and systems")


def validate_file(path: Path, model: type[Model], what: str, keys: str, content: bytes | None = None) -> Model:
    """`path` validated as `model` (its `content` when given: the bytes already read and judged, never read
    again by name); every problem is a UsageError at file:line:column with a fix."""
    from pydantic import ValidationError

    from envbuild.shared.yamlsource import load_yaml_file, parse_yaml_text

    try:
        document = load_yaml_file(path) if content is None else parse_yaml_text(_text_of(path, content), str(path))
    except SpecError as exc:  # YAML syntax or a duplicate key: located, but this is no spec
        problem = exc.problems[0]
        raise UsageError(f"{problem.file}:{problem.line}:{problem.column}: {what}: {problem.message}",
                         problem.hint) from None
    if document.data is not None and not isinstance(document.data, dict):
        raise UsageError(f"{path}:1:1: {what}: must be a mapping with {keys}, not a {type(document.data).__name__}",
                         _FIX_FORMAT)
    try:
        return model.model_validate(document.data or {})
    except ValidationError as exc:
        first = exc.errors()[0]
        loc, message, fix = tuple(first["loc"]), first["msg"].removeprefix("Value error, "), _FIX_FORMAT
        if loc[-1:] == ("[key]",):  # a mapping's key was refused: the message names it (repr: a newline shows)
            loc = loc[:-1]
            fix = ENV_NAME_FIX if loc[-2:-1] == ("env",) else fix
            field = ".".join(map(str, loc[:-1]))
        else:
            field = ".".join(map(str, loc))
        pos = document.position_of(loc)
        raise UsageError(f"{path}:{pos.line}:{pos.column}: {field}: {message}", fix) from None


def read_settings(path: str, *, project: bool = False, content: bytes | None = None) -> dict[str, Any]:
    """The validated content of envrun's config (or, with `project`, of a project's envrun.yaml) as plain
    data: {"binds": [...], "env": {...}, "systems": {NAME: {"binds", "env"}}} (+ "image", "overlays").
    `content`: the file's bytes as already read (a walked-up envrun.yaml is judged and read through one
    descriptor, envbuild.launch.trust): used as they are, the file is not opened again."""
    if content is not None:
        return _settings_of(path, content, project=project)
    try:
        with open(path, "rb") as handle:
            content = handle.read()
    except IsADirectoryError:
        raise UsageError(f"{path}: is a directory, not envrun's config file", _FIX_PATH) from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot read: {exc.strerror or exc}", "check the file and its permissions") from None
    return _settings_of(path, content, project=project)


def _settings_of(path: str, content: bytes, *, project: bool) -> dict[str, Any]:
    cache = content_cache_name("project" if project else "config", content, CACHE_FORMAT)
    cached = read_cached(cache, cache, lambda data: is_settings_data(data, project=project))
    if cached is not MISS:
        checked: dict[str, Any] = cached  # is_settings_data checked its shape
        return checked
    from pathlib import Path

    from envbuild.launch.configschema import EnvrunConfig, ProjectConfig

    data: EnvrunConfig | ProjectConfig
    if project:
        data = validate_file(Path(path), ProjectConfig, "envrun.yaml", "image, overlays, binds, env and systems", content)
    else:
        data = validate_file(Path(path), EnvrunConfig, "envrun config", "binds, env and systems", content)
    plain: dict[str, Any] = data.model_dump(mode="json")
    write_cached(cache, cache, plain)
    return plain


def _text_of(path: Path, content: bytes) -> str:
    try:
        return content.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})", "save the file as UTF-8") from None


def read_user_settings(environ: Mapping[str, str]) -> dict[str, Any]:
    """The user's envrun config as `read_settings` data; {} when there is none. A file named by
    $ENVRUN_CONFIG that does not exist is refused (a typo there would otherwise pass silently)."""
    path = config_path(environ)
    if not os.path.exists(path):
        if environ.get("ENVRUN_CONFIG"):
            raise UsageError(f"ENVRUN_CONFIG names {path}, which does not exist", "fix or unset ENVRUN_CONFIG")
        return {}
    return read_settings(path)


def settings_for(data: Mapping[str, Any], system: str) -> tuple[tuple[str, ...], dict[str, str]]:
    """(binds, env) of `read_settings` data for `system`: the global ones, then the system's."""
    extra = data.get("systems", {}).get(system, {})
    return (*data.get("binds", ()), *extra.get("binds", ())), {**data.get("env", {}), **extra.get("env", {})}


def batch_defaults_for(data: Mapping[str, Any], system: str) -> dict[str, Any]:
    """`envrun sbatch` defaults of `read_settings` data for `system`: the global ones, then the system's."""
    extra = data.get("systems", {}).get(system, {})
    merged = {**(data.get("batch") or {}), **{k: v for k, v in (extra.get("batch") or {}).items() if v is not None}}
    return {key: value for key, value in merged.items() if value is not None}


_SETTINGS_KEYS = frozenset(("binds", "env", "batch"))
_BATCH_KEYS = frozenset(("account", "partition", "time", "launcher", "requeue_max"))


def is_settings_data(data: Any, *, project: bool) -> bool:
    """Whether cached data has exactly the shape `read_settings` gives (EnvrunConfig's or ProjectConfig's
    model_dump): any other key or type, or a variable name that validation refuses, is a cache miss."""
    top = {"image", "overlays"} if project else {"trusted_dirs"}
    if type(data) is not dict or data.keys() != _SETTINGS_KEYS | {"systems"} | top:
        return False
    systems = data["systems"]
    if type(systems) is not dict or not all(_is_system_settings(item) for item in systems.values()):
        return False
    if project:
        return (data["image"] is None or type(data["image"]) is str) and is_text_list(data["overlays"]) and \
            _is_system_settings({key: data[key] for key in _SETTINGS_KEYS})
    return is_text_list(data["trusted_dirs"]) and _is_system_settings({key: data[key] for key in _SETTINGS_KEYS})


def _is_system_settings(data: Any) -> bool:
    if type(data) is not dict or data.keys() != _SETTINGS_KEYS:
        return False
    env, batch = data["env"], data["batch"]
    return (is_text_list(data["binds"]) and type(env) is dict
            and all(is_env_name(key) and type(value) is str for key, value in env.items())
            and type(batch) is dict and batch.keys() == _BATCH_KEYS
            and all(value is None or type(value) is (int if key == "requeue_max" else str) for key, value in batch.items()))


_FIX_FORMAT = "see `envrun --help` for the config format"
_FIX_PATH = "point ENVRUN_CONFIG at a YAML file, or unset it to use ~/.config/envbuild/envrun.yaml"
