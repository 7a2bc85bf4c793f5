"""Schema of envrun's config file (see envbuild.launch.config)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SystemSettings(_Strict):
    binds: tuple[str, ...] = ()
    env: dict[str, str] = {}


class EnvrunConfig(SystemSettings):
    systems: dict[str, SystemSettings] = {}

    def for_system(self, name: str) -> SystemSettings:
        extra = self.systems.get(name, SystemSettings())
        return SystemSettings(binds=(*self.binds, *extra.binds), env={**self.env, **extra.env})
