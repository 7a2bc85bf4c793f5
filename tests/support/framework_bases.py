"""Stand-ins for framework base images, in their layout, made from the debootstrap base directory in seconds:

  ngc    like NVIDIA's NGC PyTorch images: the system Python, torch in /usr/local/lib/python3.X/dist-packages,
         pip there too, `python` on PATH;
  conda  like a conda image (continuumio/miniconda3): a prefix /opt/conda with conda-meta/, its bin/ first on PATH
         (the image's environment sets it, as a Dockerfile's ENV PATH does), torch in lib/python3.X/site-packages;
  lumi   like the LUMI AI Factory images: Python in /opt/venv, on PATH through the image's environment;
  lumi-conda  like LUMI's older PyTorch images: a conda env /opt/miniconda3/envs/pytorch that the image's
         $WITH_CONDA (`source /opt/miniconda3/bin/activate pytorch`) puts first on PATH; without it the system
         python3 comes first.

Their torch is a small stand-in distribution (a dist-info and a package whose __init__ sets __version__, no
binaries): the tests check where packages go and what the lock keeps, not what torch computes. The conda and
LUMI prefixes reach the base's interpreter through a pyvenv.cfg (a real conda prefix carries its own Python
build); pip is the base's own wheel unpacked into each site directory. Each is a new directory whose
unchanged files are hard links to the base's (nothing of the base is written), named so that an import
recognises the framework by its name, as it does a real image's.
"""

from __future__ import annotations

import glob
import subprocess
import zipfile
from pathlib import Path

TORCH_VERSION = "2.5.0"
DIR_NAMES = {"ngc": "nvidia-pytorch-like", "conda": "miniconda3-like", "lumi": "lumi-multitorch-like",
             "lumi-conda": "lumi-pytorch-rocm-like"}
PREFIX = {"conda": "/opt/conda", "lumi": "/opt/venv", "lumi-conda": "/opt/miniconda3/envs/pytorch"}
WITH_CONDA = "source /opt/miniconda3/bin/activate pytorch"
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def framework_base(kind: str, debootstrap_rootfs: Path, parent: Path) -> Path:
    """The stand-in `kind` (ngc | conda | lumi | lumi-conda) as a directory under `parent`, for a `localimage:`
    base."""
    root = parent / DIR_NAMES[kind]
    subprocess.run(["cp", "-al", str(debootstrap_rootfs), str(root)], check=True)
    version = Path(sorted(glob.glob(str(root / "usr/bin/python3.*[0-9]")))[-1]).name.removeprefix("python")
    if kind == "ngc":
        site = root / f"usr/local/lib/python{version}/dist-packages"
        (root / "usr/local/bin/python").symlink_to("/usr/bin/python3")
    else:
        prefix = root / PREFIX[kind].lstrip("/")
        site = prefix / f"lib/python{version}/site-packages"
        (prefix / "bin").mkdir(parents=True)
        (prefix / "bin/python3").symlink_to(f"/usr/bin/python{version}")
        (prefix / "bin/python").symlink_to("python3")
        (prefix / "pyvenv.cfg").write_text(f"home = /usr/bin\ninclude-system-site-packages = false\nversion = {version}\n")
        if kind == "conda":
            (prefix / "conda-meta").mkdir()
            (prefix / "conda-meta/history").write_text("# stand-in for a conda prefix\n")
        env = root / ".singularity.d/env/10-docker2singularity.sh"
        if kind == "lumi-conda":  # the env is first on PATH only once $WITH_CONDA ran
            activate = root / "opt/miniconda3/bin/activate"
            activate.parent.mkdir(parents=True)
            activate.write_text(f'[ "$1" = pytorch ] || {{ echo "no conda env $1" >&2; return 1; }}\n'
                                f'export PATH="{PREFIX[kind]}/bin:$PATH" CONDA_PREFIX={PREFIX[kind]}\n')
            env.write_text(f"export PATH=\"{DEFAULT_PATH}\"\nexport WITH_CONDA='{WITH_CONDA}'\n")
        else:
            env.write_text(f'export PATH="{PREFIX[kind]}/bin:{DEFAULT_PATH}"\n')
        env.chmod(0o755)
    site.mkdir(parents=True, exist_ok=True)
    _fake_torch(site)
    wheel = sorted(glob.glob(str(root / "usr/share/python-wheels/pip-*.whl")))[-1]
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(site)
    return root


def _fake_torch(site: Path) -> None:
    (site / "torch").mkdir()
    (site / "torch/__init__.py").write_text(f'__version__ = "{TORCH_VERSION}"\n')
    info = site / f"torch-{TORCH_VERSION}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: torch\nVersion: {TORCH_VERSION}\n")
    (info / "INSTALLER").write_text("stand-in\n")
    (info / "RECORD").write_text(f"torch/__init__.py,,\ntorch-{TORCH_VERSION}.dist-info/METADATA,,\n")
