"""Dockerfiles imported with Docker's meaning: ARGs in the environment of their stage's RUNs, --build-arg for an
ARG the file lacks refused, LABEL in both of Docker's forms, FROM $ARG expanded or refused, the base's WORKDIR
noted where it cannot be read, and files with no telling name (the LUMI AI Factory's containerfiles) told by their
content. The importer keeps its own reader (here-documents, line numbers, linear time); dockerfile-parse, a
maintained parser, reads the same files here and must agree with it where both read them.

The files are written here in the shapes of public ones: NGC-based training images, Hugging Face's images,
the LUMI AI Factory's containerfile templates."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner
from dockerfile_parse import DockerfileParser
from dockerfile_parse.util import extract_key_values

from envbuild.cli.envbuild_main import main
from envbuild.convert.buildargs import substitute_run_args
from envbuild.convert.dockerfile import _docker_instructions, import_dockerfile
from envbuild.envspec.loadspec import load_spec_text
from envbuild.shared.errors import SpecError, UsageError

NGC_WITH_ARGS = """\
ARG NGC_TAG=24.05-py3
FROM nvcr.io/nvidia/pytorch:${NGC_TAG}
ARG DEBIAN_FRONTEND=noninteractive
# the NGC image pins its packages through PIP_CONSTRAINT; cleared for this stage's RUNs only
ARG PIP_CONSTRAINT=
ARG GCC_VERSION=12
ARG UNSET_ARG
WORKDIR /workspace
RUN apt-get update && apt-get install -y gcc-$GCC_VERSION
RUN pip install --no-cache-dir flash-attn
RUN ./build.sh
"""


def test_the_args_of_a_stage_are_in_the_environment_of_its_runs_only() -> None:
    result = import_dockerfile(NGC_WITH_ARGS, "ngc", build_args={"GCC_VERSION": "11"})
    exports = "export DEBIAN_FRONTEND=noninteractive PIP_CONSTRAINT='' GCC_VERSION=11\n"
    assert result.spec["post"] == [
        "mkdir -p /workspace",
        exports + "cd /workspace\napt-get update && apt-get install -y gcc-11",
        exports + "cd /workspace\npip install --no-cache-dir flash-attn",  # it sees PIP_CONSTRAINT='': stays in post
        exports + "cd /workspace\n./build.sh",  # a --build-arg only a RUN reads reaches it through its environment
    ]
    assert "env" not in result.spec  # build arguments are not the image's environment
    spec = load_spec_text(result.render("Dockerfile")).spec
    assert dict(spec.env) == {}


def test_the_exports_run_as_docker_gives_them_to_run() -> None:
    post = import_dockerfile("FROM debian\nARG A='two words' B=\"it's\"\nRUN printf '%s|%s' \"$A\" \"$B\"\n",
                             "q").spec["post"][0]
    assert subprocess.run(["sh", "-ec", post], capture_output=True, text=True, check=True).stdout == "two words|it's"


def test_an_env_of_the_same_name_wins_over_the_arg() -> None:
    text = "FROM ubuntu:24.04\nARG CONT_IMG_VER=v2\nENV CONT_IMG_VER=v1.0.0\nARG OTHER=x\nRUN echo $CONT_IMG_VER\n"
    result = import_dockerfile(text, "e", build_args={"CONT_IMG_VER": "v2.0.1"})
    assert result.spec["env"] == {"CONT_IMG_VER": "v1.0.0"}
    assert result.spec["post"] == ["export OTHER=x\necho v1.0.0"]


def test_an_arg_before_from_is_not_in_the_environment_of_the_runs() -> None:
    result = import_dockerfile("ARG TAG=24.04\nFROM ubuntu:${TAG}\nRUN echo ${TAG:-none}\n", "t")
    assert result.spec["post"] == ["echo ${TAG:-none}"]


def test_a_run_heredoc_gets_the_arguments_and_the_workdir() -> None:
    text = "FROM debian\nARG MODE=fast\nWORKDIR /opt/app\nRUN <<EOF\nmake $MODE\nEOF\n"
    assert import_dockerfile(text, "h").spec["post"] == ["mkdir -p /opt/app", "export MODE=fast\ncd /opt/app\nmake fast"]


def test_a_pip_install_with_harmless_args_still_becomes_packages() -> None:
    result = import_dockerfile("FROM ubuntu:24.04\nARG DEBIAN_FRONTEND=noninteractive\nRUN pip install six\n", "p")
    assert result.spec["python"]["packages"] == ["six"]
    assert "post" not in result.spec


# A RUN's script as the shell reads it, with the ARGs V (a plain value), MSG (one with a blank and a quote) and NOVAL
# (declared without a value): what the shell does not expand (single quotes, a quoted here-document's body, a
# comment, after a backslash, a #! script's body) is left as written, NOVAL there included.
NOT_EXPANDED = {
    "quoted here-document": ("cat <<'EOF'\nversion $V ${NOVAL} '$MSG'\nEOF", "cat <<'EOF'\nversion $V ${NOVAL} '$MSG'\nEOF"),
    "double-quoted delimiter": ('echo $V && cat <<"EOF"\n$V\nEOF', 'echo 1.2 && cat <<"EOF"\n$V\nEOF'),
    "here-document": ("echo '$V' && cat <<EOF\nit's $V \\$V\nEOF", "echo '$V' && cat <<EOF\nit's 1.2 \\$V\nEOF"),
    "two here-documents": ("cat <<'A' && cat <<-B\n$V\nA\n\t$V\n\tB", "cat <<'A' && cat <<-B\n$V\nA\n\t1.2\n\tB"),
    "quotes": ("""echo "$V" '$V' \\$V "it's $V" # $V""", """echo "1.2" '$V' \\$V "it's 1.2" # $V"""),
    "a value that reads otherwise written in": ('X=$MSG; echo "$MSG" $X', 'X=$MSG; echo "$MSG" $X'),
    "command substitution": ("""echo "$(echo '$V' "$V")" `echo $V`""", """echo "$(echo '$V' "1.2")" `echo 1.2`"""),
    "here-string": ("cat <<<$V", "cat <<<1.2"),
}


@pytest.mark.parametrize("name", sorted(NOT_EXPANDED))
def test_run_args_are_written_in_only_where_the_shell_expands_them(name: str) -> None:
    script, expected = NOT_EXPANDED[name]
    text = f"FROM debian\nARG V=1.2\nARG MSG=\"a 'b\"\nARG NOVAL\nRUN {script}\n"
    post = import_dockerfile(text, "a").spec["post"]
    exports = "export V=1.2 MSG='a '\"'\"'b'\n"
    assert post == [exports + expected]
    # the meaning: as sh runs the RUN with the ARGs in its environment (Docker's)
    environ = {"PATH": "/usr/bin:/bin", "V": "1.2", "MSG": "a 'b"}
    docker = subprocess.run(["bash", "-c", script], env=environ, capture_output=True, text=True, check=True)
    spec = subprocess.run(["bash", "-ec", post[0]], env={"PATH": "/usr/bin:/bin"}, capture_output=True, text=True,
                          check=True)
    assert spec.stdout == docker.stdout


def test_a_script_heredoc_is_the_shell_script_and_a_hash_bang_one_is_left_as_written() -> None:
    text = 'FROM debian\nARG V=1.2\nRUN <<\'EOF\'\necho $V\nEOF\nRUN <<EOF\n#!/usr/bin/env python3\nprint("$V")\nEOF\n'
    assert import_dockerfile(text, "s").spec["post"] == [
        "export V=1.2\necho 1.2",  # Docker hands the body to the shell, quoted delimiter or not
        "export V=1.2\n/usr/bin/env python3 <<'EOF'\n#!/usr/bin/env python3\nprint(\"$V\")\nEOF"]


def test_an_arg_without_a_value_is_an_error_only_where_the_shell_expands_it() -> None:
    with pytest.raises(UsageError, match=r"^Dockerfile:3: build argument NOVAL is used but has no value"):
        import_dockerfile("FROM debian\nARG NOVAL\nRUN echo \"$NOVAL\"\n", "n")
    assert import_dockerfile("FROM debian\nARG NOVAL\nRUN echo '$NOVAL'\n", "n").spec["post"] == ["echo '$NOVAL'"]


def test_an_escaped_delimiter_quotes_the_here_document_too() -> None:
    script = "cat <<\\EOF\n$V\nEOF\necho $V"
    assert substitute_run_args(script, {"V": "1.2"}, "Dockerfile", 3) == "cat <<\\EOF\n$V\nEOF\necho 1.2"


def test_an_exec_form_run_is_not_expanded() -> None:
    post = import_dockerfile('FROM debian\nARG V=1.2\nRUN ["echo", "$V"]\n', "x").spec["post"]
    assert post == ["export V=1.2\necho '$V'"]  # no shell: Docker passes $V as it is


# --- --build-arg --------------------------------------------------------------------------------------------


def test_a_build_arg_for_an_arg_only_a_run_reads_is_honoured_and_an_unknown_one_refused() -> None:
    assert "GCC_VERSION=11" in import_dockerfile(NGC_WITH_ARGS, "g", build_args={"GCC_VERSION": "11"}).spec["post"][3]
    with pytest.raises(UsageError) as caught:
        import_dockerfile(NGC_WITH_ARGS, "g", build_args={"GCC_VER": "11"}, source="ngc/Dockerfile")
    assert caught.value.message.startswith("ngc/Dockerfile: --build-arg GCC_VER: the file declares no ARG GCC_VER")
    assert "NGC_TAG (line 1), DEBIAN_FRONTEND (line 3)" in caught.value.message
    assert "drop --build-arg GCC_VER" in (caught.value.hint or "")
    stages = "FROM debian AS build\nARG JOBS=2\nRUN make -j$JOBS\nFROM debian\nRUN true\n"
    assert "line 2: --build-arg JOBS: ARG JOBS is declared only in an earlier build stage, which is not imported (ignored)" in \
        import_dockerfile(stages, "s", build_args={"JOBS": "8"}).notes


# --- LABEL --------------------------------------------------------------------------------------------------

LABELS = """\
FROM debian:bookworm
LABEL org.opencontainers.image.title="NGC training" \\
      org.opencontainers.image.description='with spaces and "quotes"' \\
      version=1.2
LABEL "com.example.vendor"="ACME Inc" multi.word=a\\ b
LABEL maintainer = "someone@example.org"
LABEL description This image is for training
"""


def test_label_is_read_with_dockers_grammar() -> None:
    result = import_dockerfile(LABELS, "l")
    assert result.spec["labels"] == {
        "org.opencontainers.image.title": "NGC training",
        "org.opencontainers.image.description": 'with spaces and "quotes"',
        "version": "1.2", "com.example.vendor": "ACME Inc", "multi.word": "a b",
        "maintainer": "= someone@example.org",  # the legacy form: the rest of the line is the value
        "description": "This image is for training",
    }
    assert ("line 6: LABEL maintainer = \"someone@example.org\": the legacy form LABEL key value (no = after the "
            "key), so Docker gives the label maintainer the value '= someone@example.org'") in "\n".join(result.notes)


def test_labels_agree_with_dockerfile_parse() -> None:
    theirs = [pair for _, word, rest in _docker_instructions(LABELS) if word == "LABEL"
              for pair in extract_key_values(False, {}, {}, rest)]
    assert list(import_dockerfile(LABELS, "l").spec["labels"].items()) == theirs


@pytest.mark.parametrize(("line", "message"), [
    ("LABEL a=1 b", "LABEL a=1 b: 'b' is not key=value"),
    ("LABEL =v", "LABEL =v: a label with an empty key"),
    ('LABEL a="open', "LABEL a=\"open: No closing quotation"),
])
def test_a_label_docker_refuses_is_a_located_error(line: str, message: str) -> None:
    with pytest.raises(UsageError) as caught:
        import_dockerfile(f"FROM debian\n{line}\n", "l")
    assert caught.value.message.startswith(f"Dockerfile:2: {message}")
    assert caught.value.hint


def test_validate_refuses_an_empty_label_key_and_a_base_with_a_variable(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=r"<spec>:3:1: labels: a label with an empty key"):
        load_spec_text("name: l\nbase: docker://debian\nlabels: {'': v}\n")
    with pytest.raises(SpecError, match=r"'docker://\$BASE_IMAGE:\$BASE_IMAGE_TAG' holds an unexpanded variable"):
        load_spec_text("name: l\nbase: docker://$BASE_IMAGE:$BASE_IMAGE_TAG\n")
    written = tmp_path / "laif.yaml"
    written.write_text("name: laif\nsystem: local\nbase: docker://$BASE_IMAGE:$BASE_IMAGE_TAG\n")
    refused = CliRunner().invoke(main, ["validate", str(written)])
    assert refused.exit_code == 2 and "holds an unexpanded variable" in refused.output


def test_the_instructions_agree_with_dockerfile_parse(tmp_path: Path) -> None:
    for text in (NGC_WITH_ARGS, LABELS, LAIF_TEMPLATE.replace("@@ BUILD_ARGS @@\n", "")):
        parser = DockerfileParser(path=str(tmp_path))
        parser.content = text
        theirs = [(item["startline"] + 1, item["instruction"], item["value"]) for item in parser.structure
                  if item["instruction"] != "COMMENT"]
        ours = [(line, word, " ".join(rest.split())) for line, word, rest in _docker_instructions(text)]
        assert ours == [(line, word, " ".join(value.split())) for line, word, value in theirs]


# --- FROM $ARG and the LUMI AI Factory's templates -------------------------------------------------------------

LAIF_TEMPLATE = """\
@@ BUILD_ARGS @@

FROM $BASE_IMAGE:$BASE_IMAGE_TAG

ARG BASE_IMAGE
ARG BASE_IMAGE_TAG
ARG TORCH_URL

RUN set -ue; \\
  python3.12 -m venv /opt/venv; \\
  /opt/venv/bin/pip install $TORCH_URL

ENV PATH="/opt/venv/bin:$PATH"
"""

LAIF_WITH_ARGS = """\
ARG BASE_IMAGE
ARG BASE_IMAGE_TAG=latest
FROM $BASE_IMAGE:$BASE_IMAGE_TAG
RUN python3 -m pip list
"""


def test_from_is_expanded_from_the_defaults_and_the_build_args() -> None:
    args = {"BASE_IMAGE": "rocm/pytorch", "BASE_IMAGE_TAG": "rocm6.2_ubuntu22.04_py3.10_pytorch_release_2.3.0"}
    assert import_dockerfile(LAIF_WITH_ARGS, "t", build_args=args).spec["base"] == f"docker://rocm/pytorch:{args['BASE_IMAGE_TAG']}"
    assert import_dockerfile(LAIF_WITH_ARGS, "t", build_args={"BASE_IMAGE": "rocm/pytorch"}).spec["base"] == \
        "docker://rocm/pytorch:latest"


def test_from_without_a_value_is_a_located_error_naming_the_argument() -> None:
    with pytest.raises(UsageError) as caught:
        import_dockerfile(LAIF_WITH_ARGS, "t", source="torch/Venv_Torch")
    assert caught.value.message.startswith("torch/Venv_Torch:3: build argument BASE_IMAGE is used but has no value")
    assert "--build-arg BASE_IMAGE=..." in (caught.value.hint or "")
    undeclared = "FROM $BASE_IMAGE\nARG BASE_IMAGE\n"  # declared in the stage only: FROM does not see it
    with pytest.raises(UsageError) as caught:
        import_dockerfile(undeclared, "t")
    assert caught.value.message == ("Dockerfile:1: build argument BASE_IMAGE has no value: it is not declared before "
                                    "the first FROM, where FROM sees it")
    assert caught.value.hint == "declare it before FROM (ARG BASE_IMAGE) and give it: envbuild import --build-arg BASE_IMAGE=..."
    assert import_dockerfile("FROM ${BASE:-debian}:bookworm\n", "t").spec["base"] == "docker://debian:bookworm"


def test_the_laif_template_imports_with_its_build_args() -> None:
    args = {"BASE_IMAGE": "lumi-rocm-base", "BASE_IMAGE_TAG": "20260415_130625", "TORCH_URL": "torch==2.7.1"}
    result = import_dockerfile(LAIF_TEMPLATE, "venv-torch", build_args=args, source="Venv_Torch")
    assert result.spec["base"] == "docker://lumi-rocm-base:20260415_130625"
    assert "$" not in result.spec["base"]
    assert result.spec["post"][0].startswith(
        "export BASE_IMAGE=lumi-rocm-base BASE_IMAGE_TAG=20260415_130625 TORCH_URL=torch==2.7.1\nset -ue;")
    assert "line 1: @@ BUILD_ARGS @@ (the LUMI AI Factory build scripts put their ARG lines here" in "\n".join(result.notes)
    with pytest.raises(UsageError) as caught:
        import_dockerfile(LAIF_TEMPLATE, "venv-torch", source="Venv_Torch")
    assert caught.value.message == ("Venv_Torch:3: build argument BASE_IMAGE has no value: it is one of the ARGs the LUMI "
                                    "AI Factory build scripts write at line 1 (@@ BUILD_ARGS @@), and no --build-arg gives it")
    assert caught.value.hint == "give it: envbuild import --build-arg BASE_IMAGE=..."


def test_a_base_read_through_another_transport_is_refused_at_its_line() -> None:
    with pytest.raises(UsageError) as caught:
        import_dockerfile("ARG BASE=oci-archive:/images/base.tar\nFROM $BASE\nRUN true\n", "o")
    assert caught.value.message.startswith("Dockerfile:2: FROM $BASE: the base is read through oci-archive:")
    assert "apptainer build base.sif oci-archive:/images/base.tar" in (caught.value.hint or "")


def test_cli_imports_a_file_with_no_telling_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "containerfiles" / "torch").mkdir(parents=True)
    (tmp_path / "containerfiles" / "torch" / "Venv_Torch").write_text(LAIF_TEMPLATE)
    runner = CliRunner()
    args = ["import", "containerfiles/torch/Venv_Torch", "--build-arg", "BASE_IMAGE=rocm/dev-ubuntu-24.04",
            "--build-arg", "BASE_IMAGE_TAG=6.4", "--build-arg", "TORCH_URL=torch", "-o", "venv-torch.yaml", "--offline"]
    done = runner.invoke(main, args)
    assert done.exit_code == 0, done.output
    assert "base: docker://rocm/dev-ubuntu-24.04:6.4" in (tmp_path / "venv-torch.yaml").read_text()
    validated = runner.invoke(main, ["validate", "venv-torch.yaml"])
    assert validated.exit_code == 0, validated.output
    missing = runner.invoke(main, ["import", "containerfiles/torch/Venv_Torch"])
    assert missing.exit_code == 2
    assert "containerfiles/torch/Venv_Torch:3: build argument BASE_IMAGE has no value" in missing.output
    assert "--build-arg BASE_IMAGE=" in missing.output


# --- WORKDIR ---------------------------------------------------------------------------------------------------

HF_SHAPE = """\
FROM nvcr.io/nvidia/pytorch:24.05-py3
ARG REF=main
RUN git clone https://github.com/huggingface/transformers && cd transformers && git checkout $REF
WORKDIR /workspace/app
RUN python3 -m pip install --no-cache-dir ./transformers
"""


def test_the_bases_workdir_is_noted_where_it_cannot_be_read_and_the_files_own_applies() -> None:
    result = import_dockerfile(HF_SHAPE, "hf")
    notes = "\n".join(result.notes)
    assert ("line 1: FROM nvcr.io/nvidia/pytorch:24.05-py3: the base's WORKDIR and ENV were not read (not asked for: "
            "envbuild import --offline): RUN, COPY and ADD before the file's own WORKDIR run in /") in notes
    assert result.spec["post"][0] == ("export REF=main\ngit clone https://github.com/huggingface/transformers && "
                                      "cd transformers && git checkout main")
    assert result.spec["post"][2].startswith("export REF=main\ncd /workspace/app\n")
    after_workdir = import_dockerfile(HF_SHAPE.replace("ARG REF=main\n", "WORKDIR /workspace\nARG REF=main\n"), "hf")
    assert not any("WORKDIR and ENV were not read" in note for note in after_workdir.notes)


def test_workdir_cd_and_exports_quote_what_they_carry() -> None:
    post = import_dockerfile("FROM debian\nARG X=\"a b\"\nWORKDIR /opt/my dir\nRUN pwd\n", "w").spec["post"]
    assert post[1] == f"export X='a b'\ncd {shlex.quote('/opt/my dir')}\npwd"
