"""Schema of envrun's config file and of a project's envrun.yaml (see envbuild.launch.config)."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, Field

from envbuild.shared.envnames import ENV_NAME_PATTERN, ENV_NAME_RULE
from envbuild.shared.strictmodel import StrictModel


def _env_name(name: str) -> str:
    """A name that lands in `export NAME=...` and a process's environment: refused unless it is one."""
    if not re.fullmatch(ENV_NAME_PATTERN, name):
        raise ValueError(f"{name!r} is not a valid environment variable name ({ENV_NAME_RULE})")
    return name


EnvName = Annotated[str, AfterValidator(_env_name)]


def _absolute_dir(path: str) -> str:
    if not path.startswith(("/", "~")):
        raise ValueError(f"{path!r} is not an absolute directory (a trusted directory is named in full, e.g. "
                         "/project/proj_123)")
    return path


AbsoluteDir = Annotated[str, AfterValidator(_absolute_dir)]


class BatchDefaults(StrictModel):
    """Defaults for `envrun sbatch`; its options win."""

    account: str | None = None
    partition: str | None = None
    time: str | None = None
    # written out for the type checker; tests/launch/test_config.py holds it equal to envbuild.launch.args.LAUNCHERS
    launcher: Literal["torchrun", "srun", "accelerate", "deepspeed"] | None = None
    requeue_max: int | None = Field(default=None, ge=0)


class SystemSettings(StrictModel):
    binds: tuple[str, ...] = ()
    env: dict[EnvName, str] = Field(default_factory=dict)
    batch: BatchDefaults = BatchDefaults()


class Settings(SystemSettings):
    """What the user's config and a project's file share: settings for every system and per system."""

    systems: dict[str, SystemSettings] = Field(default_factory=dict)

    def for_system(self, name: str) -> SystemSettings:
        extra = self.systems.get(name, SystemSettings())
        batch = {**self.batch.model_dump(exclude_none=True), **extra.batch.model_dump(exclude_none=True)}
        return SystemSettings(binds=(*self.binds, *extra.binds), env={**self.env, **extra.env},
                              batch=BatchDefaults(**batch))


class EnvrunConfig(Settings):
    """The user's own config. Only here: `trusted_dirs`, directories whose envrun.yaml envrun obeys although
    another user owns or may write it (envbuild.launch.trust); a project's file cannot trust itself."""

    trusted_dirs: tuple[AbsoluteDir, ...] = ()


class ProjectConfig(Settings):
    """A project's envrun.yaml (envbuild.launch.project): the environment to run in, plus the same settings.
    Relative paths are relative to the file's directory."""

    image: str | None = None
    overlays: tuple[str, ...] = ()
