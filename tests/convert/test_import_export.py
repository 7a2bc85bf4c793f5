"""envbuild import / export: definition files and Dockerfiles to and from specs (envbuild.convert.deffile,
envbuild.convert.dockerfile)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from spython.main.parse.parsers import DockerParser, SingularityParser

from envbuild.builder.plan.record import env_lines
from envbuild.cli.envbuild_main import main
from envbuild.convert.deffile import export_def, import_def
from envbuild.convert.dockerfile import export_dockerfile, import_dockerfile
from envbuild.convert.specexport import ExportInput
from envbuild.envspec.loadspec import load_spec, load_spec_text
from envbuild.envspec.specmodel import EnvEdit
from envbuild.shared.errors import UsageError

REPO = Path(__file__).resolve().parents[2]
BUILD_FILES = REPO / "tests" / "fixtures" / "buildfiles"
GOLDEN = REPO / "tests" / "golden"
GOLDEN_CASES = {"export-local-cpu-pytorch.def": "def", "export-local-cpu-pytorch.Dockerfile": "dockerfile"}


def golden_names() -> set[str]:
    return set(GOLDEN_CASES)


def test_def_import_maps_every_section_and_lists_the_rest() -> None:
    result = import_def((BUILD_FILES / "ubuntu-pip.def").read_text(), "ubuntu-pip")
    spec = load_spec_text(result.render("ubuntu-pip.def")).spec
    assert spec.base.describe() == "docker://ubuntu:22.04"
    # after apt-get installs pip: kept in post, in its place (issue 30: python.packages come before post)
    assert spec.python.packages == ()
    assert spec.post[0].index("apt-get install") < spec.post[0].index("numpy==1.26.4") < spec.post[0].index("-r /opt")
    assert "line 19: kept in post in its place" in "\n".join(result.notes)
    assert spec.env == {"LC_ALL": "C", "HF_HOME": "/scratch/hf"}
    assert spec.labels == {"Author": "alice@example.org", "Version": "v0.0.1"}
    assert [(f.src, f.dest) for f in spec.files] == [("train.py", "/opt/app/train.py")]
    assert spec.post[0].splitlines()[0].startswith("apt-get update && apt-get install")
    assert "python3 -m pip install -r /opt/app/requirements.txt" in spec.post[0]  # kept, and noted
    assert spec.tests == ('python3 -c "import numpy, scipy"\ntest -f /opt/app/train.py',)
    notes = "\n".join(result.notes)
    assert "line 21: kept in post: python3 -m pip install -r" in notes  # its own line, not the %post header's
    assert "line 23: %runscript" in notes and "line 30: %help" in notes


def test_def_bases() -> None:
    debootstrap = import_def("Bootstrap: debootstrap\nOSVersion: trixie\nMirrorURL: http://m/debian\nInclude: git curl\n", "d")
    assert debootstrap.spec["base"] == {"debootstrap": "trixie", "mirror": "http://m/debian", "include": ["git", "curl"]}
    assert import_def("Bootstrap: localimage\nFrom: base.sif\n", "l").spec["base"] == "localimage:base.sif"
    with pytest.raises(Exception, match="Bootstrap: yum has no envbuild base"):
        import_def("Bootstrap: yum\n", "y")


def test_dockerfile_import() -> None:
    result = import_dockerfile((BUILD_FILES / "Dockerfile").read_text(), "app")
    spec = load_spec_text(result.render("Dockerfile")).spec
    assert spec.base.describe() == "docker://python:3.11-slim"
    # after apt-get install build-essential in the same RUN: kept there, in its place (issue 30)
    assert spec.python.transformers is None and spec.python.packages == ()
    assert spec.env == {"PYTHONUNBUFFERED": "1", "APP_HOME": "/app"}
    assert spec.labels == {"org.opencontainers.image.authors": "bob@example.org", "version": "1.2"}
    assert [(f.src, f.dest) for f in spec.files] == [("requirements.txt", "/app/requirements.txt"), ("src/", "/app/src/")]
    assert spec.post == ("apt-get update && apt-get install -y --no-install-recommends build-essential && "
                         'pip install --no-cache-dir torch==2.13.0 "transformers>=4.50,<5" && rm -rf /var/lib/apt/lists/*',
                         "pip install --index-url https://example.org/simple private-pkg",
                         "mkdir -p /app")  # WORKDIR creates its directory
    notes = "\n".join(result.notes)
    for expected in ("line 12: kept in post", "line 13: USER 1000", "line 14: WORKDIR /app", "line 15: EXPOSE 8080", "line 16: CMD"):
        assert expected in notes


def test_multistage_dockerfile_imports_the_final_stage_or_refuses_copies_from_a_stage() -> None:
    text = "ARG V=3.11\nFROM python:${V} AS build\nRUN make\nFROM debian:bookworm\nRUN pip install six\n"
    result = import_dockerfile(text, "m")
    assert result.spec["base"] == "docker://debian:bookworm"
    assert result.spec["python"] == {"packages": ["six"]}
    assert "post" not in result.spec
    assert "line 2: multi-stage build: the image is the last stage (line 4)" in "\n".join(result.notes)
    with pytest.raises(UsageError, match=r"Dockerfile:5: the last stage builds on the build stage build \(line 2\)"):
        import_dockerfile(text.replace("RUN pip", "COPY --from=build /out /opt/out\nRUN pip"), "m")


FULL_SPEC = """\
name: round
system: local
base: docker://ubuntu:22.04
python:
  interpreter: python3.11
  pytorch: {version: "2.13.0", variant: cuda126, extras: [torchvision]}
  transformers: "4.57.1"
  lightning: true
  packages: [accelerate, "numpy>=1.26,<3"]
env: {A: "1", B: "two words"}
labels: {maintainer: me, org.example.version: "3"}
files:
  - {src: train.py, dest: /opt/train.py}
post:
  - |-
    apt-get update && apt-get install -y git
    echo done > /opt/marker
tests:
  - python -c "import torch"
"""


@pytest.mark.parametrize("torch_index", [None, "https://download.pytorch.org/whl/cu126", "https://mirror.example/whl/cu126"])
def test_round_trip_spec_def_spec_keeps_every_field(torch_index: str | None) -> None:
    spec = load_spec_text(FULL_SPEC).spec
    if torch_index and "mirror" in torch_index:
        spec = spec.model_copy(update={"python": spec.python.model_copy(
            update={"pytorch": spec.python.pytorch.model_copy(update={"index_url": torch_index})})})
    text = export_def(ExportInput(spec, "round.yaml", torch_index=torch_index))
    back = load_spec_text(import_def(text, "round").render("round.def")).spec
    expected = spec.model_dump()
    if torch_index and "mirror" not in torch_index:  # PyTorch's own index for the variant is the default
        expected["python"]["pytorch"]["index_url"] = None
    assert back.model_dump() == expected


def test_exported_files_parse_back_with_spython(tmp_path: Path) -> None:
    spec = load_spec_text(FULL_SPEC).spec
    definition = tmp_path / "round.def"
    definition.write_text(export_def(ExportInput(spec, "round.yaml")))
    recipe = SingularityParser(str(definition)).recipe["spython-base"]
    assert recipe.fromHeader == "ubuntu:22.04"
    assert "A=1" in recipe.environ and "maintainer me" in recipe.labels
    assert recipe.files == ["train.py /opt/train.py"]
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text(export_dockerfile(ExportInput(spec, "round.yaml")))
    parsed = DockerParser(str(dockerfile)).recipe["spython-base"]
    assert parsed.fromHeader == "ubuntu:22.04"
    assert "A=1" in parsed.environ


def test_dockerfile_round_trip_keeps_what_a_dockerfile_carries() -> None:
    spec = load_spec_text(FULL_SPEC).spec
    back = load_spec_text(import_dockerfile(export_dockerfile(ExportInput(spec, "round.yaml")), "round").render("x")).spec
    assert (back.base, back.python, back.env, back.labels, back.files) == (spec.base, spec.python, spec.env, spec.labels, spec.files)
    assert back.post == (*spec.post, *spec.tests)  # a Dockerfile has no tests: they become build steps


@pytest.mark.parametrize("name", sorted(GOLDEN_CASES))
def test_export_of_the_reference_spec_is_golden(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    result = CliRunner().invoke(main, ["export", "envs/local-cpu-pytorch.yaml", "--format", GOLDEN_CASES[name]])
    assert result.exit_code == 0, result.output
    golden = GOLDEN / name
    if os.environ.get("ENVBUILD_UPDATE_GOLDEN"):
        golden.write_text(result.stdout)
    assert result.stdout == golden.read_text()


def test_cli_import_prints_or_writes_a_loadable_spec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runner = CliRunner()
    printed = runner.invoke(main, ["import", str(BUILD_FILES / "ubuntu-pip.def")])
    assert printed.exit_code == 0, printed.output
    assert printed.stdout.startswith("# Imported by envbuild import") and "name: ubuntu-pip" in printed.stdout
    project = tmp_path / "project"
    project.mkdir()
    def_file = project / "ubuntu-pip.def"
    def_file.write_text((BUILD_FILES / "ubuntu-pip.def").read_text())
    (project / "train.py").write_text("print(1)\n")
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "train-env.yaml"  # above the definition file's directory: its files are inside the spec's
    written = runner.invoke(main, ["import", str(def_file), "-o", str(out), "--system", "local"])
    assert written.exit_code == 0, written.output
    data = yaml.safe_load(out.read_text())
    assert data["name"] == "train-env"
    assert data["files"][0] == {"src": "project/train.py", "dest": "/opt/app/train.py"}
    assert load_spec(out, check_host=False).spec.name == "train-env"
    # beside it, in another directory: the definition file's files would lie outside the spec's; refused, never allowed
    aside = tmp_path / "specs" / "train-env.yaml"
    aside.parent.mkdir()
    refused = runner.invoke(main, ["import", str(def_file), "-o", str(aside), "--system", "local"])
    assert refused.exit_code == 2 and f"{def_file}:6: %files train.py" in refused.output
    assert f"into the directory of {def_file} or a directory above it" in refused.output and not aside.exists()


def test_cli_export_writes_a_file(tmp_path: Path) -> None:
    out = tmp_path / "ref.def"
    result = CliRunner().invoke(main, ["export", str(REPO / "envs/local-cpu-pytorch.yaml"), "--format", "def", "-o", str(out), "--no-lock"])
    assert result.exit_code == 0, result.output
    assert "transformers lightning accelerate" in out.read_text()


def test_cli_errors_say_what_to_do(tmp_path: Path) -> None:
    runner = CliRunner()
    missing = runner.invoke(main, ["import", str(tmp_path / "nope.def")])
    assert missing.exit_code != 0 and "does not exist" in missing.output
    odd = tmp_path / "build.txt"
    odd.write_text("echo hello\n")
    unknown = runner.invoke(main, ["import", str(odd)])
    assert unknown.exit_code != 0 and "--format def or --format dockerfile" in unknown.output
    bad_format = runner.invoke(main, ["export", str(REPO / "envs/local-cpu-pytorch.yaml"), "--format", "singularity"])
    assert bad_format.exit_code == 2 and "'def', 'dockerfile'" in bad_format.output
    overlay = runner.invoke(main, ["export", str(REPO / "envs/lumi-overlay.yaml"), "--format", "def"])
    assert overlay.exit_code != 0 and "overlay" in overlay.output


# Dockerfiles in the shapes of public ones, with what Docker means by them (ARGs in their RUNs' environment, both
# LABEL forms, FROM $ARG, WORKDIR, ENV from before the line): import -> export -> import means the same.
ROUND_TRIP_DOCKERFILES = {
    "ngc-args": ("ARG NGC_TAG=24.05-py3\nFROM nvcr.io/nvidia/pytorch:${NGC_TAG}\nARG DEBIAN_FRONTEND=noninteractive\n"
                 "ARG PIP_CONSTRAINT=\nARG GCC_VERSION=12\nWORKDIR /workspace\n"
                 "RUN apt-get update && apt-get install -y gcc-$GCC_VERSION\nRUN pip install --no-cache-dir flash-attn\n",
                 {"GCC_VERSION": "11"}),
    "labels": ('FROM debian:bookworm\nLABEL org.opencontainers.image.title="NGC training" \\\n    version=1.2\n'
               'LABEL maintainer = "someone@example.org"\nLABEL description This image is for training\n', {}),
    "laif-template": ("@@ BUILD_ARGS @@\n\nFROM $BASE_IMAGE:$BASE_IMAGE_TAG\nARG BASE_IMAGE\nARG TORCH_URL\n"
                      "RUN set -ue; \\\n  python3.12 -m venv /opt/venv; \\\n  /opt/venv/bin/pip install $TORCH_URL\n"
                      'ENV PATH="/opt/venv/bin:$PATH"\n',
                      {"BASE_IMAGE": "rocm/dev-ubuntu-24.04", "BASE_IMAGE_TAG": "6.4", "TORCH_URL": "torch==2.7.1"}),
    "env-at-once": ("FROM ubuntu:24.04\nENV abc=hello\nENV abc=bye def=$abc\nARG REF=main\n"
                    "RUN git clone https://github.com/huggingface/transformers && git -C transformers checkout $REF\n"
                    "WORKDIR /workspace/app\nRUN <<EOF\nmake $REF\nEOF\n", {}),
}


@pytest.mark.parametrize("name", sorted(ROUND_TRIP_DOCKERFILES))
def test_dockerfile_import_export_import_means_the_same(name: str) -> None:
    text, build_args = ROUND_TRIP_DOCKERFILES[name]
    first = load_spec_text(import_dockerfile(text, "rt", build_args=build_args).render("Dockerfile")).spec
    exported = export_dockerfile(ExportInput(first, "rt.yaml"))
    assert "$BASE_IMAGE" not in exported and "@@" not in exported
    again = load_spec_text(import_dockerfile(exported, "rt").render("rt.Dockerfile")).spec
    assert again.model_dump() == first.model_dump()


# %environment lines that are not plain exported assignments: kept as shell (env_shell), in their order, after env.
CONDITIONAL_ENV = """\
Bootstrap: docker
From: debian:bookworm

%environment
    export LC_ALL=C
    export CUDA_HOME=/usr/local/cuda:${CUDA_HOME:-}
    if [ "{{ GPU }}" = yes ]; then
        export NCCL_DEBUG=WARN
    fi
    SCRATCH_ROOT=/scratch
    export HF_HOME=$SCRATCH_ROOT/hf
"""


def _sourced(spec_text: str, environ: dict[str, str], show: str) -> str:
    """What the image's environment script leaves for a program the container starts: `show` printed by a child
    of the shell that sourced it (what a variable without export does not reach)."""
    script = "\n".join([*env_lines(load_spec_text(spec_text).spec), f"sh -c 'printf %s \"{show}\"'"])
    return subprocess.run(["sh", "-c", script], env=environ, capture_output=True, text=True, check=True).stdout


def test_conditional_environment_stays_shell_in_its_order_and_is_not_flattened_by_a_build_arg() -> None:
    result = import_def(CONDITIONAL_ENV, "c", build_args={"GPU": "yes"})
    text = result.render("c.def")
    spec = load_spec_text(text).spec
    assert spec.env == {"LC_ALL": "C", "CUDA_HOME": EnvEdit(prepend="/usr/local/cuda")}  # ${X:-} is a prepend too
    assert spec.env_shell == ('if [ "yes" = yes ]; then\n    export NCCL_DEBUG=WARN\nfi\n'
                              "SCRATCH_ROOT=/scratch\nexport HF_HOME=$SCRATCH_ROOT/hf")
    assert "NCCL_DEBUG" not in spec.env  # the build argument made the condition true, not the export unconditional
    assert "line 7: %environment from here on kept as shell in env_shell" in "\n".join(result.notes)
    # As bash reads it: the condition at every start, SCRATCH_ROOT a shell variable only (no export), HF_HOME from it.
    shown = _sourced(text, {"PATH": "/usr/bin:/bin"}, "$LC_ALL|$CUDA_HOME|$NCCL_DEBUG|${SCRATCH_ROOT-unset}|$HF_HOME")
    assert shown == "C|/usr/local/cuda|WARN|unset|/scratch/hf"
    off = import_def(CONDITIONAL_ENV, "c", build_args={"GPU": "no"}).render("c.def")
    assert _sourced(off, {"PATH": "/usr/bin:/bin"}, "${NCCL_DEBUG-unset}") == "unset"


def test_a_name_set_without_export_is_not_exported() -> None:
    text = "Bootstrap: docker\nFrom: debian\n\n%environment\n    MY_TOOL=/opt/tool\n    export PATH=$MY_TOOL/bin:$PATH\n"
    result = import_def(text, "n")
    spec = load_spec_text(result.render("n.def")).spec
    assert "MY_TOOL" not in spec.env and spec.env_shell == "MY_TOOL=/opt/tool\nexport PATH=$MY_TOOL/bin:$PATH"
    assert "without export, the shell exports it only where the variable is exported already" in "\n".join(result.notes)
    assert _sourced(result.render("n.def"), {"PATH": "/usr/bin"}, "${MY_TOOL-unset}|$PATH") == "unset|/opt/tool/bin:/usr/bin"


@pytest.mark.parametrize("build_arg", ["yes", "no"])
def test_round_trip_keeps_env_shell(build_arg: str) -> None:
    spec = load_spec_text(import_def(CONDITIONAL_ENV, "c", build_args={"GPU": build_arg}).render("c.def")).spec
    exported = export_def(ExportInput(spec, "c.yaml"))
    back = load_spec_text(import_def(exported, "c").render("c.def")).spec
    assert back.model_dump() == spec.model_dump()
    again = load_spec_text(import_def(export_def(ExportInput(back, "c.yaml")), "c").render("c.def")).spec
    assert again.model_dump() == spec.model_dump()


def test_env_shell_has_no_dockerfile_form() -> None:
    spec = load_spec_text(import_def(CONDITIONAL_ENV, "c", build_args={"GPU": "no"}).render("c.def")).spec
    with pytest.raises(UsageError, match="env_shell has no Dockerfile form") as caught:
        export_dockerfile(ExportInput(spec, "c.yaml"))
    assert "--format def" in caught.value.render().split("fix:")[1]


# Specs in the new shapes, through a definition file and back: each post command and test in a subshell of its
# own, so one's cd, exports and variables do not reach the next (as envbuild runs them, each in its own shell),
# and each read back as one, pip installs in them included.
ROUND_TRIP_DEF_SPECS = {
    "post commands that change the shell's state": """\
name: rt
base: docker://ubuntu:24.04
post:
  - |-
    export GCC_VERSION=11
    cd /workspace
    apt-get install -y gcc-$GCC_VERSION
  - pip install --no-cache-dir flash-attn
  - |-
    if [ -z "${GCC_VERSION:-}" ]; then
      echo "not set" > /opt/marker
    fi
    cat > /opt/app.conf <<'EOF'
      indented = kept
    EOF
tests:
  - cd /opt && test -f marker
  - test "$(pwd)" = /
""",
    "python.target base": """\
name: rt
base: docker://nvcr.io/nvidia/pytorch:24.05-py3
python: {target: base, packages: [six]}
env_shell: |-
  if [ -n "${SLURM_JOB_ID:-}" ]; then export OMP_NUM_THREADS=1; fi
post:
  - pip install flash-attn
  - python -c 'import torch'
""",
    "venv over the base": """\
name: rt
base: docker://rocm/pytorch:latest
python: {target: venv-over-base, packages: [six]}
post: ["cd /opt\\n", "  echo indented"]
""",
}


@pytest.mark.parametrize("name", sorted(ROUND_TRIP_DEF_SPECS))
def test_def_export_import_keeps_each_post_command_and_test(name: str) -> None:
    spec = load_spec_text(ROUND_TRIP_DEF_SPECS[name]).spec
    back = load_spec_text(import_def(export_def(ExportInput(spec, "rt.yaml")), "rt").render("rt.def")).spec
    assert back.model_dump() == spec.model_dump()


def test_a_dockerfile_imported_then_exported_as_a_def_reads_back_the_same() -> None:
    for text, build_args in ROUND_TRIP_DOCKERFILES.values():
        first = load_spec_text(import_dockerfile(text, "rt", build_args=build_args).render("Dockerfile")).spec
        again = load_spec_text(import_def(export_def(ExportInput(first, "rt.yaml")), "rt").render("rt.def")).spec
        assert again.model_dump() == first.model_dump()


def test_the_exported_post_runs_each_command_as_envbuild_does(tmp_path: Path) -> None:
    """The %post of the export, run by sh, leaves what the spec's post commands leave when each runs in its own
    shell: the first one's cd and export do not reach the second."""
    post = ["export X=set-by-first\ncd /\necho \"first: $X $(pwd)\"", 'echo "second: ${X:-unset} $(pwd)"']
    spec = load_spec_text("name: rt\nbase: docker://ubuntu:24.04\npost:\n"
                          + "".join(f"  - {json_string}\n" for json_string in map(repr_yaml, post))).spec
    exported = export_def(ExportInput(spec, "rt.yaml")).split("\n%post\n", 1)[1]
    own = exported[exported.index("    (\n"):]
    as_def = subprocess.run(["sh", "-ec", own], cwd=tmp_path, capture_output=True, text=True, check=True).stdout
    each = "".join(subprocess.run(["sh", "-ec", command], cwd=tmp_path, capture_output=True, text=True,
                                  check=True).stdout for command in spec.post)
    assert as_def == each == f"first: set-by-first /\nsecond: unset {tmp_path}\n"


def repr_yaml(text: str) -> str:
    return yaml.safe_dump(text, default_style='"').strip()


def test_a_subshell_block_after_a_command_kept_in_post_stays_with_it() -> None:
    """Only a block nothing kept comes before starts from a fresh shell's state: after `cd /src` it may read the
    directory (a subshell inherits it), so it is not a post command of its own."""
    text = ("Bootstrap: docker\nFrom: ubuntu:24.04\n\n%post\n    (\n        echo alone\n    )\n    cd /src\n"
            "    (\n        make\n    )\n    echo end\n")
    assert import_def(text, "b").spec["post"] == ["echo alone", "cd /src\n(\nmake\n)\necho end"]
