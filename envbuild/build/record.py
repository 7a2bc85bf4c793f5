"""What an image says about itself: the environment script, the labels and the build record."""

from __future__ import annotations

import shlex

from envbuild.build.layers import installer_identity
from envbuild.build.paths import DEFAULT_CONTAINER_PATH
from envbuild.build.request import BuildRequest, Layers
from envbuild.shelltext import comment, env_name
from envbuild.spec.envassign import env_assignments
from envbuild.spec.model import VENV_PREFIX, Spec


def env_script(spec: Spec, version: str, spec_sha256: str) -> str:
    """The script the runtime sources at every container start: activates the venv, sets spec env."""
    lines = [
        comment(f"Written by envbuild {version} for {spec.name} (spec sha256 {spec_sha256[:16]})."),
        "# Sourced by apptainer/singularity at container start. Values are literal (no $ expansion).",
        f"export VIRTUAL_ENV={shlex.quote(VENV_PREFIX)}",
        # The runtime starts these scripts with an empty PATH and fills in its default only if they
        # leave it empty, so the default must be spelled out here.
        f"PATH=${{PATH:-{DEFAULT_CONTAINER_PATH}}}",
        f'case ":$PATH:" in *":{VENV_PREFIX}/bin:"*) ;; *) PATH="{VENV_PREFIX}/bin:$PATH" ;; esac',
        "export PATH",
    ]
    lines += env_lines(spec)
    return "\n".join(lines) + "\n"


def env_lines(spec: Spec) -> list[str]:
    """The spec's env: as export lines, in the order written (names checked once more: a name is a shell
    word here); a prepend/append entry adds to the variable's value at every start (envassign)."""
    for key in spec.env:
        env_name(key, "env")
    return [f"export {assignment}" for assignment in env_assignments(spec.env)]


def image_labels(request: BuildRequest, installer: str, layers: Layers) -> dict[str, str]:
    spec = request.spec
    labels = {
        "org.envbuild.version": request.facts.envbuild_version,
        "org.envbuild.spec-name": spec.name,
        "org.envbuild.spec-sha256": request.source.sha256,
        "org.envbuild.system": spec.system,
        "org.envbuild.base": spec.base.describe(),
        "org.envbuild.installer": installer,
        "org.envbuild.venv": VENV_PREFIX,
        "org.envbuild.base-digest": request.base.digest,
        "org.envbuild.image-key": layers.image_key,
    }
    if request.lock.sha256:
        labels["org.envbuild.lock-sha256"] = request.lock.sha256
    labels.update(spec.labels)
    return labels


def build_record(request: BuildRequest, installer: str, layers: Layers) -> dict[str, object]:
    """The provenance record embedded as /.envbuild/build.json (the record step adds `environments`)."""
    spec, facts = request.spec, request.facts
    return {
        "record_format": 2,
        "envbuild_version": facts.envbuild_version,
        "built_at": request.options.built_at,
        "spec": {"name": spec.name, "sha256": request.source.sha256},
        "lock": {"sha256": request.lock.sha256, "python": request.lock.python} if request.lock.text else None,
        "system": spec.system,
        "recipe": {"name": spec.system, "sha256": request.recipe_digest},
        "base": {"ref": spec.base.describe(), "digest": request.base.digest},
        "installer": installer_identity(request, installer),
        "runtime": {"name": facts.runtime.name, "version": facts.runtime_version},
        "build_host": dict(facts.host_info),
        "compression": request.options.compression,
        "layers": {"base": layers.base_entry, "env": layers.env_key, "env_parent": layers.env_parent,
                   "image": layers.image_key},
        "venv": VENV_PREFIX,
        "requirements": spec.python.requirements(),
    }
