"""What an image says about itself: the environment script, the labels and the build record, with the Python
programs that run inside the image at build time to list every environment's packages into that record (kept
as text here so that the plans, and their golden files, show exactly what runs)."""

from __future__ import annotations

import shlex

from envbuild.builder.plan.layers import installer_identity
from envbuild.builder.plan.plandata import BuildRequest, Layers
from envbuild.builder.plan.pythontarget import installs_into_base
from envbuild.builder.plan.sandbox import DEFAULT_CONTAINER_PATH, RECORD_DIR
from envbuild.envspec.conda import CONDA_PREFIX
from envbuild.envspec.specmodel import VENV_PREFIX, Spec, env_assignments
from envbuild.shared.shelltext import comment, env_name


def env_script(spec: Spec, version: str, spec_sha256: str) -> str:
    """The script the runtime sources at every container start: activates the venv, sets spec env."""
    venv = not installs_into_base(spec.python)
    lines = [
        comment(f"Written by envbuild {version} for {spec.name} (spec sha256 {spec_sha256[:16]})."),
        "# Sourced by apptainer/singularity at container start. Values are literal (no $ expansion).",
        *([f"export VIRTUAL_ENV={shlex.quote(VENV_PREFIX)}"] if venv else
          ["# python.target: base: the packages are in the base's own Python, first on the base's PATH."]),
        # The runtime starts these scripts with an empty PATH and fills in its default only if they
        # leave it empty, so the default must be spelled out here.
        f"PATH=${{PATH:-{DEFAULT_CONTAINER_PATH}}}",
        *([f'case ":$PATH:" in *":{VENV_PREFIX}/bin:"*) ;; *) PATH="{VENV_PREFIX}/bin:$PATH" ;; esac'] if venv else []),
        "export PATH",
    ]
    lines += env_lines(spec)
    return "\n".join(lines) + "\n"


def env_lines(spec: Spec) -> list[str]:
    """The spec's env: as export lines, in the order written (names checked once more: a name is a shell
    word here); a prepend/append entry adds to the variable's value at every start (envassign); then the
    spec's env_shell as written."""
    for key in spec.env:
        env_name(key, "env")
    lines = [f"export {assignment}" for assignment in env_assignments(spec.env)]
    if spec.env_shell:
        lines += ["# env_shell: the spec's own shell, as written (values expand here)", spec.env_shell]
    return lines


def image_labels(request: BuildRequest, installer: str, layers: Layers) -> dict[str, str]:
    spec = request.spec
    labels = {
        "org.envbuild.version": request.facts.envbuild_version,
        "org.envbuild.spec-name": spec.name,
        "org.envbuild.spec-sha256": request.source.sha256,
        "org.envbuild.system": spec.system,
        "org.envbuild.base": spec.base.describe(),
        "org.envbuild.installer": installer,
        "org.envbuild.venv": "" if installs_into_base(spec.python) else VENV_PREFIX,
        "org.envbuild.base-digest": request.base.digest,
        "org.envbuild.image-key": layers.image_key,
    }
    if spec.python.target != "envbuild-venv":
        labels["org.envbuild.python-target"] = spec.python.target
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
        "recipe": {"name": request.recipe.name, "sha256": request.recipe_digest},  # `system:` may be the file's path
        "base": {"ref": spec.base.describe(), "digest": request.base.digest},
        "installer": installer_identity(request, installer),
        "runtime": {"name": facts.runtime.name, "version": facts.runtime_version},
        "build_host": dict(facts.host_info),
        "compression": request.options.compression,
        "layers": {"base": layers.base_entry, "env": layers.env_key, "env_parent": layers.env_parent,
                   "image": layers.image_key},
        # python.target: base: the base's environment, filled in by the record step, which runs its Python.
        "venv": None if installs_into_base(spec.python) else VENV_PREFIX,
        **({"python_target": spec.python.target} if spec.python.target != "envbuild-venv" else {}),
        "requirements": spec.python.requirements(),
    }


# name==version of every distribution in the running interpreter's environment, one per line.
FREEZE_SCRIPT = ("import importlib.metadata as m; "
                 "print(chr(10).join(sorted({d.metadata['Name'] + '==' + d.version for d in m.distributions() if d.metadata['Name']})))")
# The same, written to the file named by the first argument.
FREEZE_TO_FILE_SCRIPT = ("import importlib.metadata as m, sys; "
                         "open(sys.argv[1], 'w').write(''.join(sorted({d.metadata['Name'] + '==' + d.version + chr(10) "
                         "for d in m.distributions() if d.metadata['Name']})))")
# python.target: base: the base's own distributions, listed in the env layer before the first install on the base
# (a layer built on that one keeps the list), so that the layer's package list names what the builds added.
BASE_PACKAGES = f"{RECORD_DIR}/base-packages.txt"
# FREEZE_TO_FILE_SCRIPT less the lines of the file named by the second argument.
FREEZE_ADDED_TO_FILE_SCRIPT = ("import importlib.metadata as m, sys; base = set(open(sys.argv[2]).read().split()); "
                               "open(sys.argv[1], 'w').write(''.join(sorted({d.metadata['Name'] + '==' + d.version + chr(10) "
                               "for d in m.distributions() if d.metadata['Name']} - {line + chr(10) for line in base})))")


# Runs inside the image with the Python the packages went into (the venv's, or the base's own with
# python.target: base): adds `environments` (name==version of every Python environment found: that one, the
# system Python, conda) to the build record. importlib.metadata is used rather than `pip freeze`, which a base's
# Python may lack. With python.target: base the record's "venv" becomes the prefix the packages were installed
# under (purelib's lib/pythonX.Y/site-packages three levels up: /usr/local for a Debian-style system Python), which
# verify reads as the environment the build made, and "python" the interpreter itself.
RECORD_ENVIRONMENTS_SCRIPT = f"""\
import glob, json, os, subprocess, sys, sysconfig
LIST = {FREEZE_SCRIPT!r}
found = {{}}
record_file = "{RECORD_DIR}/build.json"
with open(record_file) as handle:
    record = json.load(handle)
record_target = record.get("python_target")
main = sys.executable if record_target == "base" else "{VENV_PREFIX}/bin/python"
candidates = [main, "{VENV_PREFIX}/bin/python", "/usr/bin/python3", "/usr/local/bin/python3", "/opt/conda/bin/python"]
candidates += sorted(glob.glob("/opt/conda/envs/*/bin/python"))
candidates += ["{CONDA_PREFIX}/bin/python"] + sorted(glob.glob("{CONDA_PREFIX}/envs/*/bin/python"))
for python in dict.fromkeys(candidates):
    if os.path.exists(python):
        out = subprocess.run([python, "-I", "-c", LIST], capture_output=True, text=True)
        if out.returncode == 0:
            found[python] = out.stdout.split()
record["environments"] = found
if record_target == "base":
    record["venv"] = os.path.dirname(os.path.dirname(os.path.dirname(sysconfig.get_paths()["purelib"])))
    record["python"] = sys.executable
def replace(path, text):
    # Atomically: the file may be a hard link into the store's env layer.
    with open(path + ".partial", "w") as handle:
        handle.write(text)
    os.replace(path + ".partial", path)
replace(record_file, json.dumps(record, indent=2, sort_keys=True) + "\\n")
replace("{RECORD_DIR}/pip-freeze.txt", "".join(line + "\\n" for line in found.get(main, [])))
"""
