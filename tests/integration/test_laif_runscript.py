"""envrun honours a LUMI AI Factory-style runscript, as `singularity run` would (envbuild.launch.runscript).

The LAIF images are not on this machine. The images here are STAND-INS with their layout: the debootstrap
base of the test store (its python3), a venv at /opt/venv, and a runscript that activates it, exports a
marker and applies the LAIF rule ROCR_VISIBLE_DEVICES=$SLURM_LOCALID under ROCR_USE_SLURM_LOCALID=1 before
`exec "$@"`, in both forms the LAIF releases used: a SIF %runscript (before 20260513) and an OCI ENTRYPOINT
script behind the runscript apptainer generates for OCI images, which `eval`s its arguments unless
SINGULARITY_NO_EVAL is set. Sandbox directories (hard-linked copies of the base, about a second each) keep
this test short; the SIF path of the reader is covered by tests/launch/test_runscript.py.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO, run_cli

pytestmark = pytest.mark.apptainer
ENVRUN = str(REPO / "bin/envrun")

ACTIVATE = 'export VIRTUAL_ENV=/opt/venv\nexport PATH="/opt/venv/bin:$PATH"\n'
SETUP = """if [ "${ROCR_USE_SLURM_LOCALID:-}" = 1 ] && [ -n "${SLURM_LOCALID:-}" ]; then
    export ROCR_VISIBLE_DEVICES="$SLURM_LOCALID"
fi
. /opt/venv/bin/activate
export LAIF_STANDIN_SETUP=done
exec "$@"
"""
NATIVE_RUNSCRIPT = "#!/bin/sh\n# stand-in for a LAIF SIF runscript\n" + SETUP
ENTRYPOINT = "#!/bin/sh\n# stand-in for the LAIF /opt/oci-entrypoint.sh\n" + SETUP
# The shape of the runscript apptainer writes for an OCI image with an ENTRYPOINT, written for this test:
# without SINGULARITY_NO_EVAL the arguments are joined into one string and eval'ed.
OCI_RUNSCRIPT = """#!/bin/sh
OCI_ENTRYPOINT='"/opt/oci-entrypoint.sh"'
OCI_CMD=''
if [ -n "${SINGULARITY_NO_EVAL:-}" ]; then
    set -- '/opt/oci-entrypoint.sh' "$@"
    exec "$@"
fi
args=""
for arg in "$@"; do args="$args \\"$arg\\""; done
eval "set -- /opt/oci-entrypoint.sh $args"
exec "$@"
"""
CHECK = ("import json, os, shutil, sys; print('SEEN ' + json.dumps({'argv': [os.fsencode(a).hex() for a in sys.argv[1:]], "
         "'setup': os.environ.get('LAIF_STANDIN_SETUP'), 'python': shutil.which('python'), 'prefix': sys.prefix, "
         "'rocr': os.environ.get('ROCR_VISIBLE_DEVICES')}))")
# Words a shell would change if anything on the way parsed them again
ARGS = ["a b", "$HOME", '"quoted"', "`date`", "back\\slash", "new\nline", "*", "", "-c", "é"]


def _write(path: Path, text: str) -> None:
    path.unlink(missing_ok=True)  # a hard link into the test store: replace it, never write through it
    path.write_text(text)
    path.chmod(0o755)


def _standin(base: Path, target: Path, form: str) -> Path:
    try:
        subprocess.run(["cp", "-al", str(base), str(target)], check=True, capture_output=True)
    except subprocess.CalledProcessError:  # another file system than the store: a real copy
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(base, target, symlinks=True)
    venv = target / "opt/venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin/python").symlink_to("/usr/bin/python3")
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\ninclude-system-site-packages = false\n")
    _write(venv / "bin/activate", ACTIVATE)
    if form == "sif-runscript":
        _write(target / ".singularity.d/runscript", NATIVE_RUNSCRIPT)
    else:
        _write(target / ".singularity.d/runscript", OCI_RUNSCRIPT)
        _write(target / "opt/oci-entrypoint.sh", ENTRYPOINT)
    return target


@pytest.fixture(scope="module")
def laif_standins(debootstrap_base: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    work = tmp_path_factory.mktemp("laif-standins")
    return {form: _standin(debootstrap_base, work / form, form) for form in ("sif-runscript", "oci-entrypoint")}


@pytest.mark.parametrize("form", ["sif-runscript", "oci-entrypoint"])
def test_envrun_runs_the_runscripts_setup_and_passes_argv_byte_for_byte(form: str, laif_standins: dict[str, Path],
                                                                       tmp_path: Path) -> None:
    env = {"ENVBUILD_CACHE_DIR": str(tmp_path / "cache"), "ROCR_USE_SLURM_LOCALID": "1", "SLURM_LOCALID": "3"}
    result = run_cli([ENVRUN, "--system", "local", "--explain", "--image", str(laif_standins[form]),
                      "python", "-c", CHECK, *ARGS], env_extra=env, cwd=tmp_path, timeout=120)
    assert result.returncode == 0, result.stderr
    seen = json.loads(next(line for line in result.stdout.splitlines() if line.startswith("SEEN "))[5:])
    assert seen["argv"] == [os.fsencode(word).hex() for word in ARGS]
    assert seen["setup"] == "done", "the runscript's setup took effect"
    assert (seen["python"], seen["prefix"]) == ("/opt/venv/bin/python", "/opt/venv"), "/opt/venv first on PATH"
    # envrun keeps the choice of GPUs per task: the runscript's one-GPU-per-Slurm-task rule is switched off
    assert seen["rocr"] is None
    assert "apptainer run --no-eval, not exec:" in result.stderr
    assert "ROCR_USE_SLURM_LOCALID unset" in result.stderr
