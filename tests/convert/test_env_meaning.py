"""Issue 30: environment values keep their shell meaning (spec `env:` prepend/append entries, the image's env
script, import of %environment / ENV, export round trip) and imported pip installs keep their order."""

from __future__ import annotations

import subprocess
from collections.abc import Callable

import pytest

from envbuild.builder.plan.record import env_lines
from envbuild.convert.deffile import export_def, import_def
from envbuild.convert.dockerfile import export_dockerfile, import_dockerfile
from envbuild.convert.specexport import ExportInput
from envbuild.envspec.jsonschema import spec_json_schema
from envbuild.envspec.loadspec import load_spec_text
from envbuild.envspec.specmodel import EnvEdit
from envbuild.shared.errors import SpecError

HEAD = "name: e\nbase: docker://debian:bookworm\nenv:\n"


def _env(body: str) -> dict[str, object]:
    return dict(load_spec_text(HEAD + body).spec.env)


def test_env_entries_prepend_append_and_literal_in_the_order_written() -> None:
    env = _env("  PATH: {prepend: /opt/conda/bin}\n  FOO: bar\n  LD_LIBRARY_PATH: {append: /opt/x/lib, prepend: /a}\n")
    assert list(env) == ["PATH", "FOO", "LD_LIBRARY_PATH"]
    assert env == {"PATH": EnvEdit(prepend="/opt/conda/bin"), "FOO": "bar",
                   "LD_LIBRARY_PATH": EnvEdit(prepend="/a", append="/opt/x/lib")}


@pytest.mark.parametrize(("body", "message"), [
    ("  PATH: {prepand: /x}\n", "env.PATH: unknown key 'prepand'"),
    ("  PATH: {}\n", "env.PATH: give prepend: and/or append:"),
    ("  PATH: {prepend: ''}\n", "env.PATH: prepend: '' would add an empty entry"),
    ("  PATH: {append: '/a:'}\n", "env.PATH: append: '/a:' would add an empty entry"),
    ("  PATH: {prepend: [a]}\n", "env.PATH: prepend: must be a string or number, got list"),
    ("  PATH: {prepend: yes}\n", "env.PATH: prepend: a YAML true/false/yes/no is ambiguous"),
])
def test_bad_env_entries_are_located_errors(body: str, message: str) -> None:
    with pytest.raises(SpecError) as caught:
        load_spec_text(HEAD + body)
    assert f"<spec>:4:3: {message}" in str(caught.value)


def _run_env(lines: list[str], environ: dict[str, str], show: str) -> str:
    script = "\n".join([*lines, f'printf %s "{show}"'])
    return subprocess.run(["sh", "-c", script], env=environ, capture_output=True, text=True, check=True).stdout


def test_env_script_prepends_appends_and_quotes_every_value() -> None:
    spec = load_spec_text(HEAD + "  PATH: {prepend: /opt/x/bin}\n  LIB: {append: /a b}\n  Q: \"$HOME 'q'\"\n"
                          "  NEW: {prepend: /n}\n").spec
    lines = env_lines(spec)
    assert lines[0] == """export PATH=/opt/x/bin"${PATH:+:$PATH}\""""
    shown = _run_env(lines, {"PATH": "/usr/bin:/bin", "LIB": "/l", "HOME": "/h"}, "$PATH|$LIB|$Q|$NEW")
    # NEW was unset: no empty entry (the current directory) after /n
    assert shown == "/opt/x/bin:/usr/bin:/bin|/l:/a b|$HOME 'q'|/n"


def test_def_environment_import_keeps_shell_meaning() -> None:
    text = ("Bootstrap: docker\nFrom: debian:bookworm\n\n%environment\n"
            "    export PATH=/opt/conda/bin:$PATH\n"
            "    export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:/opt/x/lib\n"
            "    export OMPI_DIR=/opt/ompi\n"
            "    export PATH=$OMPI_DIR/bin:$PATH  # mpi first\n"
            "    export CACHE=${HOME}/x\n"
            "    export STAMP=$(date)\n")
    result = import_def(text, "d")
    spec = load_spec_text(result.render("d.def")).spec
    assert spec.env == {"PATH": EnvEdit(prepend="/opt/ompi/bin:/opt/conda/bin"),
                        "LD_LIBRARY_PATH": EnvEdit(append="/opt/x/lib"), "OMPI_DIR": "/opt/ompi"}
    # What env cannot say stays shell, in its order after env: $HOME and $(date) expand at every start.
    assert spec.env_shell == "export CACHE=${HOME}/x\nexport STAMP=$(date)"
    assert ("line 9: %environment from here on kept as shell in env_shell, in its order after env "
            "(export CACHE=${HOME}/x: $HOME is not set earlier in this file, so its value is not known here)") in result.notes
    assert "$" not in str(result.spec["env"])


def test_dockerfile_env_import_keeps_shell_meaning() -> None:
    text = ("FROM debian:bookworm\nARG V=2\nENV PATH=/opt/conda/bin:$PATH LD_LIBRARY_PATH=/opt/x/lib:${LD_LIBRARY_PATH}\n"
            "ENV APP=/app/$V\nENV PYTHONPATH=$APP/src\nENV HOME_CACHE=$HOME/c\nENV OLD old form value\n")
    result = import_dockerfile(text, "k")
    spec = load_spec_text(result.render("Dockerfile")).spec
    assert spec.env == {"PATH": EnvEdit(prepend="/opt/conda/bin"), "LD_LIBRARY_PATH": EnvEdit(prepend="/opt/x/lib"),
                        "APP": "/app/2", "PYTHONPATH": "/app/2/src", "OLD": "old form value"}
    assert "line 6: ENV HOME_CACHE=$HOME/c: HOME_CACHE not imported ($HOME is not set earlier" in "\n".join(result.notes)


def test_dockerfile_env_reads_every_variable_from_before_the_instruction() -> None:
    """Docker's own example (Dockerfile reference, "Environment replacement"): `ENV abc=bye def=$abc` gives def
    the value abc had before the line, and a name the line itself sets is not seen by its other assignments."""
    result = import_dockerfile("FROM busybox\nENV abc=hello\nENV abc=bye def=$abc\nENV ghi=$abc\n", "d")
    assert result.spec["env"] == {"abc": "bye", "def": "hello", "ghi": "bye"}
    same_line = import_dockerfile("FROM debian\nENV APP=/app PYTHONPATH=$APP/src\n", "d")
    # $APP is the base's (not known here), not /app: PYTHONPATH cannot be carried, APP can, exactly
    assert same_line.spec["env"] == {"APP": "/app"}
    assert same_line.notes[0].startswith("line 1: FROM debian: the base's WORKDIR and ENV were not read")
    assert same_line.notes[1:] == ["line 2: ENV APP=/app PYTHONPATH=$APP/src: PYTHONPATH not imported ($APP is read "
                                   "from before this line, as Docker reads it, not from the APP= beside it: the base's "
                                   "value (empty where it sets none; not read: see the note at FROM); write the value "
                                   "in its place); the line's other assignments are"]
    # a name set again from what is not known keeps no older value: the image's is not that one any more
    again = import_dockerfile("FROM debian\nENV FOO=1 BAR=2\nENV FOO=$UNSET BAR=$BAR:x\n", "d")
    assert again.spec["env"] == {"BAR": "2:x"}
    assert "line 3: ENV FOO=$UNSET BAR=$BAR:x: FOO not imported ($UNSET is not set earlier" in again.notes[1]
    edits = import_dockerfile("FROM debian\nENV P=/a\nENV P=/b:$P Q=$P\n", "d").spec["env"]
    assert edits == {"P": "/b:/a", "Q": "/a"}


@pytest.mark.parametrize("export", [export_def, export_dockerfile])
def test_export_round_trips_env_edits(export: Callable[[ExportInput], str]) -> None:
    spec = load_spec_text(HEAD + "  PATH: {prepend: /opt/x/bin}\n  L: {prepend: /p, append: /a}\n  F: \"b$r\"\n").spec
    text = export(ExportInput(spec=spec, source="e.yaml"))
    importer = import_def if export is export_def else import_dockerfile
    back = load_spec_text(importer(text, "e").render("exported")).spec
    assert back.env == spec.env


def test_json_schema_has_the_edit_form() -> None:
    schema = spec_json_schema()
    assert "prepend" in str(schema["properties"]["env"]) or "EnvEdit" in schema.get("$defs", {})
    assert set(schema["$defs"]["EnvEdit"]["properties"]) == {"prepend", "append"}


def test_pip_install_after_other_post_commands_stays_in_its_place() -> None:
    text = ("Bootstrap: docker\nFrom: ubuntu:22.04\n\n%post\n"
            "    apt-get update && apt-get install -y python3-pip\n"
            "    pip install torch\n"
            "    pip install opencv-python-headless\n")
    result = import_def(text, "p")
    spec = load_spec_text(result.render("p.def")).spec
    assert spec.python.packages == ()
    post = "\n".join(spec.post)
    assert post.index("apt-get") < post.index("pip install torch") < post.index("opencv")
    assert "line 6: kept in post in its place: pip install torch (commands before it" in "\n".join(result.notes)


def test_pip_install_first_on_a_plain_base_becomes_packages() -> None:
    result = import_dockerfile("FROM ubuntu:22.04\nRUN pip install six && apt-get update\nRUN pip install attrs\n", "p")
    assert result.spec["python"] == {"packages": ["six"]}  # attrs comes after apt-get: stays in post
    assert result.spec["post"] == ["apt-get update", "pip install attrs"]


@pytest.mark.parametrize("base", ["nvcr.io/nvidia/pytorch:24.01-py3", "continuumio/miniconda3", "localimage:x.sif"])
def test_pip_install_on_a_base_with_its_own_python_goes_into_it(base: str) -> None:
    """The file installs into the base's Python: so does the spec (python.target: base), with the install in
    python.packages, which that target installs with the base's Python before any post command."""
    header = f"Bootstrap: localimage\nFrom: {base[11:]}\n" if base.startswith("localimage:") else \
        f"Bootstrap: docker\nFrom: {base}\n"
    result = import_def(header + "\n%post\n    pip install transformers\n", "n")
    assert result.spec["python"] == {"target": "base", "transformers": True} and "post" not in result.spec


def test_a_framework_base_without_pip_installs_still_keeps_its_python() -> None:
    result = import_dockerfile("FROM nvcr.io/nvidia/pytorch:24.01-py3\nRUN apt-get update\nRUN pip install six\n", "f")
    assert result.spec["python"] == {"target": "base"}
    assert result.spec["post"] == ["apt-get update", "pip install six"]  # after apt-get: in its place, into the base


def test_a_plain_base_keeps_envbuilds_venv() -> None:
    result = import_dockerfile("FROM ubuntu:22.04\nRUN pip install six\n", "u")
    assert "target" not in result.spec["python"]


def test_verify_shows_an_edit_as_the_spec_writes_it() -> None:
    from envbuild.verify.imagecheck import _env_shown

    assert _env_shown(EnvEdit(prepend="/opt/x/bin")) == "{prepend: '/opt/x/bin'}"
    assert _env_shown("plain") == "'plain'"


def test_pip_install_after_a_workdir_stays_in_post() -> None:
    result = import_dockerfile("FROM ubuntu:22.04\nWORKDIR /app\nRUN pip install six\n", "w")
    assert "python" not in result.spec
    assert result.spec["post"][-1].endswith("pip install six")
