"""Schema of envrun's config file (see envbuild.launch.config)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from envbuild.strictmodel import StrictModel


class BatchDefaults(StrictModel):
    """Defaults for `envrun sbatch`; its options win."""

    account: str | None = None
    partition: str | None = None
    time: str | None = None
    launcher: Literal["torchrun", "srun", "accelerate", "deepspeed"] | None = None
    requeue_max: int | None = Field(default=None, ge=0)


class SystemSettings(StrictModel):
    binds: tuple[str, ...] = ()
    env: dict[str, str] = Field(default_factory=dict)
    batch: BatchDefaults = BatchDefaults()


class EnvrunConfig(SystemSettings):
    systems: dict[str, SystemSettings] = Field(default_factory=dict)

    def for_system(self, name: str) -> SystemSettings:
        extra = self.systems.get(name, SystemSettings())
        batch = {**self.batch.model_dump(exclude_none=True), **extra.batch.model_dump(exclude_none=True)}
        return SystemSettings(binds=(*self.binds, *extra.binds), env={**self.env, **extra.env},
                              batch=BatchDefaults(**batch))


class ProjectConfig(EnvrunConfig):
    """A project's envrun.yaml (envbuild.launch.project): the environment to run in, plus the same settings.
    Relative paths are relative to the file's directory."""

    image: str | None = None
    overlays: tuple[str, ...] = ()
