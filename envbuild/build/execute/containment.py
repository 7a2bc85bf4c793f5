"""What of the host reaches a build's tools and the image: the environment the executor starts tools with,
and the modes of the directories it makes inside an image's root file system."""

from __future__ import annotations

import os
from collections.abc import Mapping

# apptainer and singularity pass these into every container, --cleanenv or not (APPTAINERENV_HF_TOKEN
# becomes HF_TOKEN inside): a build step would see, and a post command could write into the image, what
# the user meant for their own runs. Builds pass their own variables with the prefix (Run.env).
CONTAINER_ENV_PREFIXES = ("APPTAINERENV_", "SINGULARITYENV_")


def tool_environment(environ: Mapping[str, str], extra: tuple[tuple[str, str], ...] = ()) -> dict[str, str]:
    """The environment of a build tool: the host's, less what the runtime would carry into the container,
    plus the action's own variables."""
    env = {key: value for key, value in environ.items() if not key.startswith(CONTAINER_ENV_PREFIXES)}
    env.update(dict(extra))
    return env


def make_dirs(path: str, mode: int | None) -> None:
    """os.makedirs(path, exist_ok=True); with `mode`, every directory it creates gets exactly `mode` (not
    less the umask), the existing ones keep theirs."""
    missing = []
    probe = os.path.abspath(path)
    while not os.path.lexists(probe):
        missing.append(probe)
        probe = os.path.dirname(probe)
    os.makedirs(path, exist_ok=True)
    if mode is not None:
        for created in missing:
            os.chmod(created, mode)
