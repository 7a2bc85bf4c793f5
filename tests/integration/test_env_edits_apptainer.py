"""Issue 30 on real apptainer: a spec's `PATH: {prepend: ...}` / `{append: ...}` entries add to the variable
inside the image at every start (the env script), the rest of PATH kept; a literal value stays literal.
A tiny spec on the debootstrap base directory as a `localimage:` base, its own store."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.support.build_faults import ENVBUILD

pytestmark = [pytest.mark.apptainer, pytest.mark.slow]

SPEC = """\
name: envedits
base: localimage:{base}
env:
  PATH: {{prepend: /opt/x/bin}}
  LD_LIBRARY_PATH: {{append: /opt/x/lib}}
  LITERAL: "$HOME stays"
post:
  - mkdir -p /opt/x/bin /opt/x/lib && printf '#!/bin/sh\\necho from-x\\n' > /opt/x/bin/xtool && chmod 755 /opt/x/bin/xtool
"""


def test_prepend_and_append_inside_the_built_image(tmp_path: Path, debootstrap_base: Path) -> None:
    spec = tmp_path / "envedits.yaml"
    spec.write_text(SPEC.format(base=debootstrap_base))
    image = tmp_path / "envedits.sif"
    built = run_cli([ENVBUILD, "build", str(spec), "-o", str(image), "--compression", "zstd"],
                    env_extra={"ENVBUILD_CACHE_DIR": str(tmp_path / "store")}, timeout=1200)
    assert built.returncode == 0, built.stdout + built.stderr[-4000:]
    shown = subprocess.run(["apptainer", "exec", "--cleanenv", str(image), "sh", "-c",
                            'echo "$PATH"; echo "$LD_LIBRARY_PATH"; echo "$LITERAL"; xtool'],
                           capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    path, libraries, literal, tool = shown.stdout.splitlines()
    assert path.startswith("/opt/x/bin:") and "/usr/bin" in path.split(":")
    # unset before (--cleanenv): no empty entry; apptainer adds its own /.singularity.d/libs after the scripts
    assert libraries.split(":")[0] == "/opt/x/lib" and "" not in libraries.split(":")
    assert literal == "$HOME stays"
    assert tool == "from-x"


CSC_STYLE_DEF = """\
Bootstrap: localimage
From: {base}

%environment
    export OMPI_DIR=/opt/ompi
    export PATH=$OMPI_DIR/bin:$PATH
    export LD_LIBRARY_PATH=$OMPI_DIR/lib:$LD_LIBRARY_PATH
    export PYTHONPATH=$PYTHONPATH:/opt/app/src

%post
    mkdir -p /opt/ompi/bin /opt/ompi/lib /opt/app/src
    printf '#!/bin/sh\\necho ompi-tool\\n' > /opt/ompi/bin/ompitool && chmod 755 /opt/ompi/bin/ompitool
"""


def test_an_imported_definition_file_keeps_its_environment_in_the_image(tmp_path: Path, debootstrap_base: Path) -> None:
    recipe = tmp_path / "csc.def"
    recipe.write_text(CSC_STYLE_DEF.format(base=debootstrap_base))
    spec = tmp_path / "csc.yaml"
    imported = run_cli([ENVBUILD, "import", str(recipe), "-o", str(spec)])
    assert imported.returncode == 0, imported.stderr
    assert "$" not in spec.read_text().split("env:", 1)[1].split("post:", 1)[0]  # no literal $VAR values
    image = tmp_path / "csc.sif"
    built = run_cli([ENVBUILD, "build", str(spec), "-o", str(image), "--compression", "zstd"],
                    env_extra={"ENVBUILD_CACHE_DIR": str(tmp_path / "store")}, timeout=1200)
    assert built.returncode == 0, built.stdout + built.stderr[-4000:]
    shown = subprocess.run(["apptainer", "exec", "--cleanenv", str(image), "sh", "-c",
                            'echo "$PATH"; echo "$LD_LIBRARY_PATH"; echo "$PYTHONPATH"; ompitool; ls /'],
                           capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    path, libraries, pythonpath, tool = shown.stdout.splitlines()[:4]
    assert path.startswith("/opt/ompi/bin:") and "/usr/bin" in path.split(":")  # `ls` still found
    assert libraries.split(":")[0] == "/opt/ompi/lib" and "" not in libraries.split(":")
    assert pythonpath == "/opt/app/src"
    assert tool == "ompi-tool"
