r"""Issue 30 on real apptainer: definition files and Dockerfiles written in the shapes of public ones (CSC's
LUMI/Puhti defs, an NGC-based Dockerfile, a LUMI AI Factory containerfile, sylabs-style defs) are imported,
built, and checked inside the image for what the original means; the imported spec exported again (def and,
where the base allows, Dockerfile) imports back to a spec that means the same.

The originals name the registry images their public counterparts start from (nvcr.io, docker.io, LUMI's
/appl/local sif images), unreachable here: the built spec's base is substituted by `localimage:` the debootstrap
rootfs of the shared test store (the `debootstrap_base` fixture). Nothing needs the network but one pip install
of a small pure-Python package from PyPI, in post as the original has it (the host's CA bundle copied in, as a
site's Dockerfile behind a TLS-inspecting proxy does). All builds share the test store (`build_cache`)."""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from envbuild.envspec.loadspec import load_spec_text
from tests.conftest import run_cli
from tests.support.build_faults import ENVBUILD

pytestmark = [pytest.mark.apptainer, pytest.mark.slow]


@dataclass(frozen=True)
class Shape:
    filename: str
    text: str
    check: str  # run by sh in the image (apptainer exec --cleanenv); its stdout lines are compared
    expected: list[str]  # per stdout line: the exact text, or a regular expression when it starts with ^
    build_args: tuple[str, ...] = ()
    extra_files: dict[str, str] = field(default_factory=dict)  # next to the recipe (for %files / COPY)
    labels: dict[str, str] = field(default_factory=dict)  # expected in `apptainer inspect --labels`


LUMI_DEF = Shape("lumi-miniapp.def", r"""Bootstrap: localimage
From: /appl/local/containers/sif-images/lumi-rocm-rocm-6.2.4.sif

%environment
    export MINIAPP_HOME=/opt/miniapp
    export PATH=/opt/miniapp/bin:$PATH
    export LD_LIBRARY_PATH=/opt/miniapp/lib:$LD_LIBRARY_PATH

%post
    mkdir -p /opt/miniapp/bin /opt/miniapp/lib
    printf '#!/bin/sh\necho miniapp "$MINIAPP_HOME"\n' > /opt/miniapp/bin/miniapp
    chmod 755 /opt/miniapp/bin/miniapp
""", 'echo "$PATH"; echo "$LD_LIBRARY_PATH"; miniapp',
    [r"^/opt/miniapp/bin:(.*:)?/usr/bin(:.*)?$", r"^/opt/miniapp/lib(:[^:]+)*$", "miniapp /opt/miniapp"])

PUHTI_DEF = Shape("puhti-tools.def", r"""Bootstrap: docker
From: ubuntu:22.04

%files
    run.sh /opt/tools/run.sh
    data.txt /opt/tools/

%labels
    Author csc-staff
    Version v1.2

%environment
    export PATH=/opt/tools:$PATH
    export PYTHONPATH=$PYTHONPATH:/opt/tools/python

%post
    chmod 755 /opt/tools/run.sh
    mkdir -p /opt/tools/python
    echo 'ANSWER = 42' > /opt/tools/python/toolconf.py
""", 'run.sh; echo "$PYTHONPATH"; python3 -c "import toolconf; print(toolconf.ANSWER)"',
    ["tools data: puhti", "/opt/tools/python", "42"],
    extra_files={"run.sh": '#!/bin/sh\necho "tools data: $(cat /opt/tools/data.txt)"\n', "data.txt": "puhti\n"},
    labels={"Author": "csc-staff", "Version": "v1.2"})

NGC_DOCKERFILE = Shape("ngc-app.Dockerfile", r"""ARG BASE_TAG=24.01-py3
FROM nvcr.io/nvidia/pytorch:${BASE_TAG}
ARG APP_DIR=/workspace/app
ENV APP_DIR=${APP_DIR} \
    OMP_NUM_THREADS=1
WORKDIR ${APP_DIR}
RUN mkdir -p data && echo "ngc ${APP_DIR}" > data/where.txt
ENV PATH=/workspace/app/bin:$PATH
WORKDIR /workspace
RUN mkdir -p app/bin && printf '#!/bin/sh\necho ngc-tool\n' > app/bin/ngctool && chmod 755 app/bin/ngctool
""", 'cat /workspace/app/data/where.txt; echo "$APP_DIR $OMP_NUM_THREADS"; ngctool',
    ["ngc /workspace/app", "/workspace/app 1", "ngc-tool"])

LAIF_CONTAINERFILE = Shape("Containerfile.laif", r"""FROM docker.io/library/ubuntu:24.04
LABEL org.opencontainers.image.title="laif-mini" \
      org.opencontainers.image.vendor="LUMI AI Factory"
ENV DEBIAN_FRONTEND=noninteractive \
    LC_ALL=C.UTF-8
RUN set -eux; \
    mkdir -p /opt/laif/etc /opt/laif/lib; \
    echo "rocm=6.2" > /opt/laif/etc/versions; \
    python3 -c "import sys; print(sys.version_info[0])" > /opt/laif/etc/python-major
ENV LD_LIBRARY_PATH=/opt/laif/lib:$LD_LIBRARY_PATH
CMD ["/bin/bash"]
""", 'cat /opt/laif/etc/versions /opt/laif/etc/python-major; echo "$LC_ALL"; echo "$LD_LIBRARY_PATH"',
    ["rocm=6.2", "3", "C.UTF-8", r"^/opt/laif/lib(:[^:]+)*$"],
    labels={"org.opencontainers.image.title": "laif-mini", "org.opencontainers.image.vendor": "LUMI AI Factory"})

ARGUMENTS_DEF = Shape("arguments.def", r"""Bootstrap: docker
From: ubuntu:{{ UBUNTU_VERSION }}

%arguments
    UBUNTU_VERSION=22.04
    APP_VERSION=1.0
    PREFIX=/opt/app

%environment
    export APP_VERSION={{ APP_VERSION }}
    export PATH={{ PREFIX }}/bin:$PATH

%post
    mkdir -p {{ PREFIX }}/bin
    echo "{{ APP_VERSION }}" > {{ PREFIX }}/VERSION
""", 'echo "$APP_VERSION"; cat /opt/app/VERSION; echo "$PATH"',
    ["2.5", "2.5", r"^/opt/app/bin:(.*:)?/usr/bin(:.*)?$"], build_args=("APP_VERSION=2.5",))

HEREDOC_DEF = Shape("heredoc.def", r"""Bootstrap: docker
From: ubuntu:22.04

%post
    mkdir -p /etc/myapp
    cat > /etc/myapp/config.yaml <<'EOF'
model:
  name: tiny
  path: $HOME/models
EOF
    cat > /usr/local/bin/hello <<EOF
#!/bin/sh
echo "hello from $(echo built)"
EOF
    chmod 755 /usr/local/bin/hello
""", 'cat /etc/myapp/config.yaml; hello',
    ["model:", "  name: tiny", "  path: $HOME/models", "hello from built"])

# A site's CA bundle copied in for pip, as Dockerfiles behind a TLS-inspecting proxy do: the post's own pip runs
# in the image with the image's certificates (the host's pip configuration is for python.packages only).
HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
PIP_DOCKERFILE = Shape("pip-after-apt.Dockerfile", r"""FROM docker.io/library/python:3.11-slim
RUN apt-get clean && rm -rf /var/lib/apt/lists/*
COPY site-ca.crt /usr/local/share/site-ca.crt
RUN python3 -m venv /opt/venv
ENV VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH \
    PIP_CERT=/usr/local/share/site-ca.crt
RUN pip install --no-cache-dir tabulate
""", 'command -v python3; python3 -c "import tabulate; print(tabulate.__name__)"',
    ["/opt/venv/bin/python3", "tabulate"],
    extra_files={"site-ca.crt": HOST_CA_BUNDLE.read_text() if HOST_CA_BUNDLE.exists() else ""})

SYLABS_DEF = Shape("sylabs-style.def", r"""BootStrap: docker
From: ubuntu:22.04

%help
    A small tool in the shape of the sylabs lolcow example.

%environment
    export LC_ALL=C
    export PATH=/usr/games:$PATH

%post
    # the example installs fortune and cowsay here; a tiny stand-in keeps it offline
    mkdir -p /usr/games
    printf '#!/bin/sh\necho "moo: $*"\n' > /usr/games/cowsay
    chmod 755 /usr/games/cowsay

%runscript
    date | cowsay
""", 'echo "$LC_ALL"; cowsay hi; echo "$PATH"',
    ["C", "moo: hi", r"^/usr/games:(.*:)?/usr/bin(:.*)?$"])

SHAPES = [LUMI_DEF, PUHTI_DEF, NGC_DOCKERFILE, LAIF_CONTAINERFILE, ARGUMENTS_DEF, HEREDOC_DEF, PIP_DOCKERFILE, SYLABS_DEF]


def _import(recipe: Path, spec: Path, build_args: tuple[str, ...] = ()) -> str:
    arguments = [word for value in build_args for word in ("--build-arg", value)]
    imported = run_cli([ENVBUILD, "import", str(recipe), "-o", str(spec), *arguments], timeout=120)
    assert imported.returncode == 0, imported.stdout + imported.stderr
    return spec.read_text()


def _meaning(spec_text: str) -> dict:
    """What a spec means for the image: all but its name, post as one script (a definition file has one
    %post, a Dockerfile one RUN per step: the same commands in the same order)."""
    dumped = load_spec_text(spec_text).spec.model_dump()
    dumped.pop("name")
    dumped["post"] = "\n".join(dumped["post"])
    return dumped


def _check_export_round_trip(spec: Path, imported: str, work: Path) -> list[str]:
    """Export the imported spec in each format its base allows and import it again; the formats checked."""
    checked = []
    for fmt, suffix in (("def", ".def"), ("dockerfile", ".Dockerfile")):
        exported = work / f"exported{suffix}"
        result = run_cli([ENVBUILD, "export", str(spec), "--format", fmt, "-o", str(exported)], timeout=120)
        if fmt == "dockerfile" and result.returncode != 0 and "cannot start from" in result.stderr:
            continue  # a localimage base: no Dockerfile can express it, and export says so
        assert result.returncode == 0, result.stdout + result.stderr
        again = _import(exported, work / f"again-{fmt}.yaml")
        assert _meaning(again) == _meaning(imported), f"{fmt} export of {spec.name}:\n{exported.read_text()}"
        checked.append(fmt)
    return checked


def _on_local_base(spec_text: str, debootstrap_base: Path, work: Path) -> Path:
    """The spec with its registry image replaced by the tiny local base."""
    local = work / "local.yaml"
    local.write_text(re.sub(r"^base: .*$", f"base: localimage:{debootstrap_base}", spec_text, count=1, flags=re.M))
    return local


def _assert_shows(image: Path, shape: Shape, context: str) -> None:
    shown = subprocess.run(["apptainer", "exec", "--cleanenv", str(image), "sh", "-c", shape.check],
                           capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    assert _lines_match(shown.stdout.splitlines(), shape.expected), (shown.stdout, shape.expected, context)


def _lines_match(got: list[str], expected: list[str]) -> bool:
    return len(got) == len(expected) and all(
        re.fullmatch(want, line) if want.startswith("^") else line == want for line, want in zip(got, expected, strict=True))


@pytest.mark.parametrize("shape", SHAPES, ids=[shape.filename for shape in SHAPES])
def test_import_builds_what_the_recipe_means_and_exports_back(shape: Shape, tmp_path: Path, debootstrap_base: Path,
                                                              build_cache: Path) -> None:
    recipe = tmp_path / shape.filename
    recipe.write_text(shape.text)
    for name, content in shape.extra_files.items():
        (tmp_path / name).write_text(content)
    spec = tmp_path / "imported.yaml"
    imported = _import(recipe, spec, shape.build_args)
    assert "{{" not in imported and "${" not in imported.split("post:", 1)[0]  # arguments substituted

    round_trip = tmp_path / "round-trip"
    round_trip.mkdir()
    for name, content in shape.extra_files.items():
        (round_trip / name).write_text(content)
    assert "def" in _check_export_round_trip(spec, imported, round_trip)

    local = _on_local_base(imported, debootstrap_base, tmp_path)
    image = tmp_path / "image.sif"
    built = run_cli([ENVBUILD, "build", str(local), "-o", str(image), "--compression", "zstd"],
                    env_extra={"ENVBUILD_CACHE_DIR": str(build_cache)}, timeout=900)
    assert built.returncode == 0, built.stdout + built.stderr[-4000:]
    _assert_shows(image, shape, imported)
    if shape.labels:
        inspected = subprocess.run(["apptainer", "inspect", "--labels", str(image)], capture_output=True, text=True, timeout=60)
        assert inspected.returncode == 0, inspected.stderr
        for key, value in shape.labels.items():
            assert f"{key}: {value}" in inspected.stdout, inspected.stdout


def test_an_exported_definition_files_post_runs_in_the_image(tmp_path: Path, debootstrap_base: Path) -> None:
    """`envbuild export --format def` of the imported heredoc recipe: its %post, as the exported file has it, run
    by sh in a writable sandbox of the base (what `apptainer build` does with it; a root `apptainer build` with a
    %post cannot run on this machine: its capability set is short of what apptainer requests): the
    here-documents close (their end markers are not indented) and write what the original wrote."""
    recipe = tmp_path / HEREDOC_DEF.filename
    recipe.write_text(HEREDOC_DEF.text)
    local = _on_local_base(_import(recipe, tmp_path / "imported.yaml"), debootstrap_base, tmp_path)
    exported = run_cli([ENVBUILD, "export", str(local), "--format", "def"], timeout=120)
    assert exported.returncode == 0, exported.stderr
    post = exported.stdout.split("\n%post\n", 1)[1].split("\n%test\n", 1)[0]
    sandbox = tmp_path / "sandbox"
    made = subprocess.run(["apptainer", "build", "--sandbox", str(sandbox), str(debootstrap_base)],
                          capture_output=True, text=True, timeout=600)
    assert made.returncode == 0, made.stderr[-3000:]
    ran = subprocess.run(["apptainer", "exec", "--writable", "--cleanenv", "--no-mount", "home,cwd,tmp", str(sandbox),
                          "/bin/sh", "-ec", post], capture_output=True, text=True, timeout=600)
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:] + post
    _assert_shows(sandbox, HEREDOC_DEF, exported.stdout)
