"""Stand-ins for site images, which are not on this machine (no LUMI, no Docker Hub): same layout, our content.

Each is the reference image (envs/local-cpu-pytorch.yaml: torch 2.13 CPU, transformers, lightning)
rearranged to look like a site image from the inside:

  lumi  like LUMI's lumi-pytorch-rocm-*.sif: Python in a conda-style env /opt/miniconda3/envs/pytorch
        (with conda-meta/), activated only by $WITH_CONDA="source /opt/miniconda3/bin/activate pytorch",
        which the image's environment sets; /bin/sh is dash (Debian), so `source` needs bash.
  aif   like the LUMI AI Factory images: Python in /opt/venv, on PATH through the image's environment.

They differ from the real images in content only (no ROCm, no conda binary: the `activate` script is a
small bash stand-in for conda's), which is what an overlay build and envrun read. Built once per
reference image into the shared test store (zstd squash: about 10 s each) and reused across runs.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import subprocess
from pathlib import Path

STANDIN_VERSION = 1
LUMI_ENV = "/opt/miniconda3/envs/pytorch"
WITH_CONDA = "source /opt/miniconda3/bin/activate pytorch"

# A bash stand-in for conda's activate script: the parts LUMI's $WITH_CONDA relies on.
ACTIVATE = """\
# stand-in for conda's bin/activate (sourced by bash): `source /opt/miniconda3/bin/activate ENV`
_env=${1:-base}
if [ ! -d "/opt/miniconda3/envs/$_env" ]; then
    echo "EnvironmentNameNotFound: Could not find conda environment: $_env" >&2
    return 1
fi
export CONDA_PREFIX="/opt/miniconda3/envs/$_env" CONDA_DEFAULT_ENV="$_env"
export PATH="$CONDA_PREFIX/bin:$PATH"
"""

ENV_SCRIPTS = {
    "lumi": f'export WITH_CONDA="{WITH_CONDA}"\n',
    "aif": 'export VIRTUAL_ENV=/opt/venv\nPATH="/opt/venv/bin:${PATH:-/usr/local/bin:/usr/bin:/bin}"\nexport PATH\n',
}
PYTHON_PREFIX = {"lumi": LUMI_ENV, "aif": "/opt/venv"}


def standin_image(kind: str, reference: Path, store: Path, runtime: str = "apptainer") -> Path:
    """The stand-in `kind` (lumi | aif) made from `reference`, built into `store` once."""
    with open(reference, "rb") as handle:
        identity = handle.read(128)  # the SIF header: its image id changes with the content
    key = hashlib.sha256(identity + f"{kind}-{STANDIN_VERSION}".encode()).hexdigest()[:16]
    target = store / "standins" / f"{kind}-{key}.sif"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    work = target.parent / f"work-{kind}-{os.getpid()}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    try:
        sandbox = work / "sandbox"
        subprocess.run([runtime, "build", "--force", "--sandbox", str(sandbox), str(reference)], check=True,
                       capture_output=True)
        rearrange(kind, sandbox)
        _squash(sandbox, work, Path(f"{target}.partial"), runtime)
        os.replace(f"{target}.partial", target)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return target


def rearrange(kind: str, root: Path) -> None:
    """Move the reference image's venv to where the site image keeps its Python and set its environment."""
    prefix = PYTHON_PREFIX[kind]
    old = "/opt/envbuild/venv"
    (root / prefix.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
    shutil.move(str(root / old.lstrip("/")), str(root / prefix.lstrip("/")))
    shutil.rmtree(root / "opt/envbuild", ignore_errors=True)
    bin_dir = root / prefix.lstrip("/") / "bin"
    for script in bin_dir.iterdir():  # console scripts name their interpreter by absolute path
        if script.is_file() and not script.is_symlink():
            data = script.read_bytes()
            if data.startswith(b"#!" + old.encode()):
                script.write_bytes(data.replace(old.encode(), prefix.encode(), 1))
    if kind == "lumi":
        meta = root / prefix.lstrip("/") / "conda-meta"
        meta.mkdir()
        (meta / "history").write_text("# stand-in for a conda env made by LUMI's image recipe\n")
        (meta / "python-3.11.2-h0_stand_in.json").write_text('{"name": "python", "version": "3.11.2"}\n')
        activate = root / "opt/miniconda3/bin/activate"
        activate.parent.mkdir(parents=True, exist_ok=True)
        activate.write_text(ACTIVATE)
    env_dir = root / ".singularity.d/env"
    (env_dir / "90-envbuild.sh").unlink(missing_ok=True)
    (env_dir / "90-standin.sh").write_text(ENV_SCRIPTS[kind])
    (env_dir / "90-standin.sh").chmod(0o755)
    shutil.rmtree(root / ".envbuild", ignore_errors=True)  # not an envbuild image any more


def _squash(sandbox: Path, work: Path, output: Path, runtime: str) -> None:
    from envbuild.builder.execute.executor import BuildExecutor
    from envbuild.builder.plan.actions import Step
    from envbuild.builder.plan.squashplan import squash_actions

    actions = squash_actions(str(sandbox), str(output), compression="zstd", runtime_path=runtime, work_dir=str(work))
    BuildExecutor(work / "squash.log", store_root=work, out=io.StringIO()).execute_steps(
        (Step("squash", "squash the stand-in", actions),), None, "stand-in")
