"""Python programs that run inside an image at build time: list every environment's packages into the
build record. Kept as text here so that the plans (and their golden files) show exactly what runs."""

from __future__ import annotations

from envbuild.build.paths import RECORD_DIR
from envbuild.spec.conda import CONDA_PREFIX
from envbuild.spec.model import VENV_PREFIX

# name==version of every distribution in the running interpreter's environment, one per line.
FREEZE_SCRIPT = ("import importlib.metadata as m; "
                 "print(chr(10).join(sorted({d.metadata['Name'] + '==' + d.version for d in m.distributions() if d.metadata['Name']})))")
# The same, written to the file named by the first argument.
FREEZE_TO_FILE_SCRIPT = ("import importlib.metadata as m, sys; "
                         "open(sys.argv[1], 'w').write(''.join(sorted({d.metadata['Name'] + '==' + d.version + chr(10) "
                         "for d in m.distributions() if d.metadata['Name']})))")


# Runs inside the image with the venv's Python: adds `environments` (name==version of every Python
# environment found: the venv, the system Python, conda) to the build record. importlib.metadata is
# used rather than `pip freeze`, which a base's Python may lack.
RECORD_ENVIRONMENTS_SCRIPT = f"""\
import glob, json, os, subprocess
LIST = {FREEZE_SCRIPT!r}
found = {{}}
candidates = ["{VENV_PREFIX}/bin/python", "/usr/bin/python3", "/usr/local/bin/python3", "/opt/conda/bin/python"]
candidates += sorted(glob.glob("/opt/conda/envs/*/bin/python"))
candidates += ["{CONDA_PREFIX}/bin/python"] + sorted(glob.glob("{CONDA_PREFIX}/envs/*/bin/python"))
for python in candidates:
    if os.path.exists(python):
        out = subprocess.run([python, "-I", "-c", LIST], capture_output=True, text=True)
        if out.returncode == 0:
            found[python] = out.stdout.split()
record_file = "{RECORD_DIR}/build.json"
with open(record_file) as handle:
    record = json.load(handle)
record["environments"] = found
def replace(path, text):
    # Atomically: the file may be a hard link into the store's env layer.
    with open(path + ".partial", "w") as handle:
        handle.write(text)
    os.replace(path + ".partial", path)
replace(record_file, json.dumps(record, indent=2, sort_keys=True) + "\\n")
replace("{RECORD_DIR}/pip-freeze.txt", "".join(line + "\\n" for line in found.get("{VENV_PREFIX}/bin/python", [])))
"""
