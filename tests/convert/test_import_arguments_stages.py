"""`envbuild import` keeps what a recipe means (issue 30): build arguments substituted or refused, multi-stage files
built from their last stage or refused, notes at their own lines, here-documents byte for byte, WORKDIR kept.

The recipes are written here in the shapes of public ones (CSC singularity-recipes for LUMI, LAIF containerfiles
with %arguments, NGC-based Dockerfiles with ARG before FROM, sylabs multi-stage examples)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from envbuild.cli.envbuild_main import main
from envbuild.convert.buildargs import parse_build_args
from envbuild.convert.deffile import import_def
from envbuild.convert.dockerfile import import_dockerfile
from envbuild.envspec.loadspec import load_spec_text
from envbuild.shared.errors import UsageError

LAIF_STYLE_DEF = """\
Bootstrap: docker
From: {{ BASE_IMAGE }}:{{ BASE_TAG }}

%arguments
    BASE_IMAGE=ubuntu
    BASE_TAG=24.04
    PYTHON_VERSION=3.12
    APP_DIR=/opt/app

%files
    run.sh {{ APP_DIR }}/run.sh

%environment
    export APP_DIR={{ APP_DIR }}

%labels
    python {{PYTHON_VERSION}}

%post
    apt-get install -y python{{ PYTHON_VERSION }}-venv
    echo {{ PYTHON_VERSION }} > /opt/python-version
"""


def test_def_arguments_defaults_and_build_args_are_substituted_everywhere() -> None:
    result = import_def(LAIF_STYLE_DEF, "laif", build_args={"PYTHON_VERSION": "3.11"})
    spec = load_spec_text(result.render("laif.def")).spec
    assert spec.base.describe() == "docker://ubuntu:24.04"
    assert [(f.src, f.dest) for f in spec.files] == [("run.sh", "/opt/app/run.sh")]
    assert spec.labels == {"python": "3.11"}
    assert spec.post == ("apt-get install -y python3.11-venv\necho 3.11 > /opt/python-version",)
    assert "{{" not in result.render("laif.def")
    assert not any("arguments" in note for note in result.notes)  # nothing claims what did not happen


def test_def_placeholder_without_a_value_is_an_error_naming_it_and_the_option() -> None:
    text = LAIF_STYLE_DEF.replace("    PYTHON_VERSION=3.12\n", "")
    with pytest.raises(UsageError) as caught:
        import_def(text, "laif", source="laif.def")
    assert caught.value.message.startswith("laif.def:16: build argument PYTHON_VERSION is used but has no value")
    assert "--build-arg PYTHON_VERSION=" in (caught.value.hint or "")
    # a placeholder in a commented-out line is not read
    import_def(text.replace("python{{ PYTHON_VERSION }}", "python3").replace("echo {{ PYTHON_VERSION }}", "# {{ PYTHON_VERSION }}")
               .replace("{{PYTHON_VERSION}}", "x"), "laif")


def test_def_from_header_with_a_placeholder_is_not_a_localimage_and_an_empty_tag_is_refused() -> None:
    text = "Bootstrap: docker\nFrom: {{BASE_IMAGE}}\n\n%arguments\n    BASE_IMAGE=rocm/pytorch:latest\n"
    assert import_def(text, "b").spec["base"] == "docker://rocm/pytorch:latest"
    with pytest.raises(UsageError, match=r"^b.def:2: From: ubuntu: gives the image reference 'ubuntu:'"):
        import_def("Bootstrap: docker\nFrom: ubuntu:{{ TAG }}\n", "b", build_args={"TAG": ""}, source="b.def")



@pytest.mark.parametrize(("bootstrap", "example"), [("localimage", "/path/to/base.sif"), ("docker", "ubuntu:24.04")])
def test_an_empty_base_image_argument_is_named_with_the_option_that_fills_it(bootstrap: str, example: str) -> None:
    """Not 'Bootstrap: localimage has no envbuild base ... use Bootstrap: localimage', which it is already."""
    text = f"Bootstrap: {bootstrap}\nFrom: {{{{ BASE_IMAGE }}}}\n\n%arguments\n    BASE_IMAGE=\n"
    with pytest.raises(UsageError) as caught:
        import_def(text, "b", source="b.def")
    assert caught.value.render() == (f"error: b.def:2: From: is empty: the build argument BASE_IMAGE it is made of is empty\n"
                                     f"  fix: give the image: envbuild import --build-arg BASE_IMAGE=... (e.g. {example})")
    with pytest.raises(UsageError, match=r"^b.def:2: From: is empty: the build arguments IMG and REG it is made of are"):
        import_def(f"Bootstrap: {bootstrap}\nFrom: {{{{ REG }}}}/{{{{ IMG }}}}\n", "b", source="b.def",
                   build_args={"REG": "", "IMG": ""})
    with pytest.raises(UsageError, match=r"^b.def:1: Bootstrap: localimage without a From: line") as missing:
        import_def("Bootstrap: localimage\n\n%post\n    true\n", "b", source="b.def")
    assert "fix: add one after it, e.g. From: /path/to/base.sif" in missing.value.render()
    assert import_def(text, "b", build_args={"BASE_IMAGE": example}).spec["base"].endswith(example.removeprefix("/"))


NGC_STYLE_DOCKERFILE = """\
# NGC-based training image
ARG BASE_TAG=24.05-py3
ARG APP_VERSION=0.1
FROM nvcr.io/nvidia/pytorch:${BASE_TAG}

ARG APP_VERSION
ARG DEBIAN_FRONTEND=noninteractive
ARG BASE_TAG_SEEN
ENV APP_VERSION=${APP_VERSION}
WORKDIR /workspace/app
COPY requirements.txt .
RUN apt-get update && apt-get install -y --no-install-recommends git \\
    && echo "${APP_VERSION} $DEBIAN_FRONTEND" > version.txt && echo '$APP_VERSION' $HOME
RUN echo ${BASE_TAG:-unset}
"""


def test_dockerfile_args_follow_dockers_scoping() -> None:
    result = import_dockerfile(NGC_STYLE_DOCKERFILE, "ngc", build_args={"BASE_TAG_SEEN": "x"})
    spec = load_spec_text(result.render("Dockerfile")).spec
    assert spec.base.describe() == "docker://nvcr.io/nvidia/pytorch:24.05-py3"
    assert spec.env["APP_VERSION"] == "0.1"  # declared again in the stage: the value before FROM
    assert [(f.src, f.dest) for f in spec.files] == [("requirements.txt", "/workspace/app/requirements.txt")]
    # the stage's ARGs with a value are in each RUN's environment (not the image's); APP_VERSION is an ENV too,
    # which wins over the ARG, as in Docker
    assert spec.post == ("mkdir -p /workspace/app",
                         "export DEBIAN_FRONTEND=noninteractive BASE_TAG_SEEN=x\n"
                         "cd /workspace/app\napt-get update && apt-get install -y --no-install-recommends git && "
                         "echo \"0.1 noninteractive\" > version.txt && echo '$APP_VERSION' $HOME",
                         # BASE_TAG is declared before FROM only: not seen in RUN, as in Docker
                         "export DEBIAN_FRONTEND=noninteractive BASE_TAG_SEEN=x\ncd /workspace/app\necho ${BASE_TAG:-unset}")
    assert not any("ARG" in note or "substitut" in note for note in result.notes)
    with_arg = import_dockerfile(NGC_STYLE_DOCKERFILE, "ngc", build_args={"BASE_TAG": "25.01-py3", "APP_VERSION": "2"})
    assert with_arg.spec["base"] == "docker://nvcr.io/nvidia/pytorch:25.01-py3"
    assert with_arg.spec["env"]["APP_VERSION"] == "2"


def test_dockerfile_arg_without_a_value_and_an_empty_tag_are_errors() -> None:
    with pytest.raises(UsageError) as caught:
        import_dockerfile("ARG TAG\nFROM python:${TAG}\n", "p")
    assert caught.value.message.startswith("Dockerfile:2: build argument TAG is used but has no value")
    assert "--build-arg TAG=" in (caught.value.hint or "")
    with pytest.raises(UsageError, match=r"Dockerfile:2: FROM python:\$\{TAG\} gives the image reference 'python:'"):
        import_dockerfile("ARG TAG\nFROM python:${TAG}\n", "p", build_args={"TAG": ""})
    with pytest.raises(UsageError, match=r"Dockerfile:3: build argument V is used"):
        import_dockerfile("FROM debian\nARG V\nRUN echo $V\n", "p")
    assert import_dockerfile("ARG TAG\nFROM python:${TAG:-3.12}\n", "p").spec["base"] == "docker://python:3.12"


CSC_STYLE_MULTISTAGE_DEF = """\
Bootstrap: docker
From: ubuntu:22.04
Stage: build

%post
    apt-get install -y build-essential
    make -C /src install PREFIX=/opt/tool

Bootstrap: docker
From: ubuntu:22.04
Stage: final

%files from build
    /opt/tool /opt/tool

%post
    ln -s /opt/tool/bin/tool /usr/local/bin/tool
"""


def test_multistage_def_copying_from_a_stage_is_refused_and_never_spliced_into_post() -> None:
    with pytest.raises(UsageError) as caught:
        import_def(CSC_STYLE_MULTISTAGE_DEF, "tool", source="tool.def")
    assert caught.value.message.startswith("tool.def:13: %files from build copies files out of the build stage build (line 1)")
    assert "localimage:build.sif" in (caught.value.hint or "")
    without_copy = CSC_STYLE_MULTISTAGE_DEF.replace("%files from build\n    /opt/tool /opt/tool\n", "")
    result = import_def(without_copy, "tool")
    assert result.spec["post"] == ["ln -s /opt/tool/bin/tool /usr/local/bin/tool"]
    assert "line 9: multi-stage definition: the image is the last stage" in "\n".join(result.notes)


def test_multistage_dockerfile_building_on_a_stage_is_refused() -> None:
    text = "FROM ubuntu:24.04 AS base\nRUN make\nFROM base\nRUN echo hi\n"
    with pytest.raises(UsageError, match=r"Dockerfile:3: the last stage builds on the build stage base \(line 1\)"):
        import_dockerfile(text, "m")


POST_WITH_BLANKS_COMMENTS_HEREDOC = """\
Bootstrap: docker
From: ubuntu:24.04

%post

    set -e
    apt-get update
    # pip install -r /old/requirements.txt
    pip install -r /opt/requirements.txt
    cat > /opt/setup.cfg <<'EOF'
    [tool]
        indented = yes\x20\x20\x20
    pip install not-a-command
    EOF
    echo done
"""


def test_def_notes_at_their_own_line_none_for_comments_and_heredocs_kept_byte_for_byte() -> None:
    result = import_def(POST_WITH_BLANKS_COMMENTS_HEREDOC, "h")
    assert [note.split(":", 1)[0] for note in result.notes] == ["line 9"]  # the pip -r line; not the commented one
    post = result.spec["post"][0]
    assert "\n    [tool]\n        indented = yes   \n    pip install not-a-command\n    EOF\n" in post
    assert "not-a-command" not in str(result.spec.get("python"))


def test_dockerfile_run_heredoc_kept_byte_for_byte() -> None:
    text = "FROM debian\nRUN <<EOF\nset -e\n  if true; then\n    echo '  spaced'\n  fi\nEOF\n"
    assert import_dockerfile(text, "h").spec["post"] == ["set -e\n  if true; then\n    echo '  spaced'\n  fi"]


def test_workdir_from_an_env_value_takes_it_and_an_unknown_one_is_refused_at_its_line() -> None:
    """Docker expands the file's ENV in WORKDIR; a variable import has no value for is refused, not written."""
    post = import_dockerfile("FROM debian\nENV APP_HOME=/app\nWORKDIR $APP_HOME\nRUN make\n", "w").spec["post"]
    assert post == ["mkdir -p /app", "cd /app\nmake"]
    with pytest.raises(UsageError, match=r"Dockerfile:3: WORKDIR \$APP_HOME"):
        import_dockerfile("FROM debian\nENV APP=/app\nWORKDIR $APP_HOME\nRUN make\n", "w")


def test_scif_sections_are_refused_at_their_line() -> None:
    text = "Bootstrap: docker\nFrom: ubuntu\n\n%appinstall foo\n    make\n%apprun foo\n    exec foo\n"
    with pytest.raises(UsageError, match=r"^s.def:4: %appinstall foo: SCIF apps"):
        import_def(text, "s", source="s.def")


def test_cli_build_arg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "Dockerfile").write_text("ARG TAG\nFROM python:${TAG}\nRUN echo hi\n")
    runner = CliRunner()
    done = runner.invoke(main, ["import", "Dockerfile", "--build-arg", "TAG=3.12-slim", "--offline"])
    assert done.exit_code == 0, done.output
    assert "base: docker://python:3.12-slim" in done.output
    refused = runner.invoke(main, ["import", "Dockerfile"])
    assert refused.exit_code == 2 and "Dockerfile:2: build argument TAG" in refused.output
    assert "--build-arg TAG=" in refused.output
    with pytest.raises(UsageError, match="not NAME=VALUE"):
        parse_build_args(["TAG"])


def test_copy_to_an_unknown_variable_is_refused_not_copied_to_a_literal_path() -> None:
    with pytest.raises(UsageError, match=r"Dockerfile:3: COPY app.py \$APP_HOME/ uses a variable"):
        import_dockerfile("FROM debian\nENV APP=/app\nCOPY app.py $APP_HOME/\n", "c")
    from_env = import_dockerfile("FROM debian\nENV APP_HOME=/app\nCOPY app.py $APP_HOME/\n", "c")
    assert [(f["src"], f["dest"]) for f in from_env.spec["files"]] == [("app.py", "/app/app.py")]
    copied = import_dockerfile("FROM debian\nARG HOME_DIR=/app\nCOPY app.py ${HOME_DIR}/\n", "c")
    assert [(f["src"], f["dest"]) for f in copied.spec["files"]] == [("app.py", "/app/app.py")]


def test_exec_form_run_with_a_heredoc_inside_its_string_round_trips() -> None:
    script = "cat > /opt/a.cfg <<'EOF'\n  key = 1\nEOF\necho next"
    text = "FROM debian\nRUN " + json.dumps(["/bin/sh", "-ec", script]) + "\nRUN echo after\n"
    assert import_dockerfile(text, "e").spec["post"] == [script, "echo after"]


def test_run_heredoc_with_an_interpreter_line_runs_with_that_interpreter() -> None:
    text = "FROM python:3.12\nRUN <<EOF\n#!/usr/bin/env python3\nprint('  hi')\nEOF\n"
    assert import_dockerfile(text, "p").spec["post"] == [
        "/usr/bin/env python3 <<'EOF'\n#!/usr/bin/env python3\nprint('  hi')\nEOF"]


def test_a_build_arg_the_file_does_not_have_is_refused_in_a_dockerfile_and_in_a_def() -> None:
    with pytest.raises(UsageError) as caught:
        import_dockerfile("FROM debian\nARG GCC_VERSION=12\nRUN ./build.sh\n", "d", build_args={"GCC_VERSON": "11"},
                          source="Dockerfile.gcc")
    assert caught.value.message.startswith("Dockerfile.gcc: --build-arg GCC_VERSON: the file declares no ARG GCC_VERSON")
    assert "GCC_VERSION (line 2)" in caught.value.message and "11" not in caught.value.message  # a value may be secret
    assert caught.value.hint == "drop --build-arg GCC_VERSON, or correct its name to one of the file's ARGs"
    with pytest.raises(UsageError) as refused:
        import_def(LAIF_STYLE_DEF, "l", build_args={"TAGG": "1"}, source="laif.def")
    assert refused.value.message == (
        "laif.def: --build-arg TAGG: the file uses no build argument TAGG, so the value would change nothing; the "
        "file's build arguments: BASE_IMAGE (line 2), BASE_TAG (line 2), PYTHON_VERSION (line 7), APP_DIR (line 8)")
    assert refused.value.hint == "drop --build-arg TAGG, or correct its name to one of the file's build arguments"
    # one that only %arguments declares is the file's too, as Apptainer reads it
    assert import_def(LAIF_STYLE_DEF + "\n%arguments\n    UNUSED=1\n", "l", build_args={"UNUSED": "2"}).spec


def test_def_section_notes_count_blank_lines_and_continuations() -> None:
    text = ("Bootstrap: docker\nFrom: ubuntu\n\n%environment\n\n    export A=1 \\\n        B=2\n"
            "    source /opt/conda/etc/profile.d/conda.sh\n%labels\n\n    org.envbuild.x y\n%files\n\n    a.txt relative/a.txt\n")
    notes = [note.split(": ", 1)[0] for note in import_def(text, "n").notes]
    assert notes == ["line 8", "line 11", "line 14"]


def test_copy_heredoc_is_written_in_post_byte_for_byte() -> None:
    text = "FROM debian\nWORKDIR /etc/app\nCOPY --chmod=600 <<'EOF' conf.ini\n[a]\n  b = $HOME\nEOF\nRUN cat conf.ini\n"
    post = import_dockerfile(text, "c").spec["post"]
    assert post[1] == "mkdir -p /etc/app\ncat > /etc/app/conf.ini <<'EOF'\n[a]\n  b = $HOME\nEOF\nchmod 600 /etc/app/conf.ini"
    assert post[2] == "cd /etc/app\ncat conf.ini"
    with pytest.raises(UsageError, match=r"Dockerfile:2: COPY <<EOF /x: only a here-document"):
        import_dockerfile("FROM debian\nCOPY <<EOF /x\n$HOME\nEOF\n", "c")
