"""Schema of envrun's config file (see envbuild.launch.config)."""

from __future__ import annotations

from pydantic import Field

from envbuild.strictmodel import StrictModel


class SystemSettings(StrictModel):
    binds: tuple[str, ...] = ()
    env: dict[str, str] = Field(default_factory=dict)


class EnvrunConfig(SystemSettings):
    systems: dict[str, SystemSettings] = Field(default_factory=dict)

    def for_system(self, name: str) -> SystemSettings:
        extra = self.systems.get(name, SystemSettings())
        return SystemSettings(binds=(*self.binds, *extra.binds), env={**self.env, **extra.env})


class ProjectConfig(EnvrunConfig):
    """A project's envrun.yaml (envbuild.launch.project): the environment to run in, plus the same settings.
    Relative paths are relative to the file's directory."""

    image: str | None = None
    overlays: tuple[str, ...] = ()
