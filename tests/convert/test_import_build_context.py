"""`envbuild import` keeps a recipe's files inside its build context (issue 40).

A Dockerfile `COPY ~/.ssh/id_rsa /opt/app/config` or a `../../..` source became a spec entry with
`allow_outside_spec_dir: true`, without a word: the build copied the user's key into an image others could
read. Docker never copies from outside its build context; import now refuses such a source (a Dockerfile's
COPY/ADD, a definition file's %files) at its line, with a fix, and never writes allow_outside_spec_dir."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from envbuild.cli.envbuild_main import main
from envbuild.convert.deffile import import_def
from envbuild.convert.dockerfile import import_dockerfile
from envbuild.envspec.loadspec import load_spec_text
from envbuild.shared.errors import UsageError

OUTSIDE = ["~/.ssh/id_rsa", "~", "../../../etc/passwd", "..", "/etc/shadow", "/home/victim/.ssh/id_rsa",
           "conf/../../secret", "./../x"]


@pytest.mark.parametrize("src", OUTSIDE)
@pytest.mark.parametrize("form", ["COPY {src} /opt/app/config", "ADD {src} /opt/app/config",
                                  'COPY ["{src}", "/opt/app/config"]', "COPY --chmod=0644 app.py {src} /opt/app/"])
def test_a_dockerfile_source_outside_the_build_context_is_refused_at_its_line(src: str, form: str) -> None:
    text = f"FROM ubuntu:22.04\nRUN echo hi\n{form.format(src=src)}\n"
    with pytest.raises(UsageError) as refused:
        import_dockerfile(text, "env", source="proj/Dockerfile")
    assert refused.value.message.startswith("proj/Dockerfile:3: ")
    assert repr(src) in refused.value.message and "outside the build context" in refused.value.message
    assert "copy what the image needs into the directory of proj/Dockerfile" in (refused.value.hint or "")


@pytest.mark.parametrize("src", OUTSIDE)
def test_a_definition_files_source_outside_its_directory_is_refused_at_its_line(src: str) -> None:
    text = f"Bootstrap: docker\nFrom: ubuntu:22.04\n\n%files\n    app.py /opt/app/app.py\n    {src} /opt/app/config\n"
    with pytest.raises(UsageError) as refused:
        import_def(text, "env", source="proj/env.def")
    assert refused.value.message.startswith(f"proj/env.def:6: %files {src} /opt/app/config: ")
    assert "outside the build context" in refused.value.message and refused.value.hint


@pytest.mark.parametrize("prefix", ["", "proj", "a/b"])
def test_sources_inside_the_context_are_carried_without_any_allowance(prefix: str) -> None:
    docker = import_dockerfile("FROM ubuntu:22.04\nCOPY app.py ./conf/../data/ src/ /opt/app/\n", "env",
                               src_prefix=prefix, source="Dockerfile")
    definition = import_def("Bootstrap: docker\nFrom: ubuntu:22.04\n%files\n    ./a/../app.py /opt/app.py\n", "env",
                            src_prefix=prefix, source="env.def")
    for result, source in ((docker, "Dockerfile"), (definition, "env.def")):
        rendered = result.render(source)
        assert "allow_outside_spec_dir" not in rendered
        for item in load_spec_text(rendered).spec.files:
            assert not item.allow_outside_spec_dir and not item.src.startswith(("/", "~", ".."))
            assert item.src.startswith(f"{prefix}/" if prefix else "")


def test_the_cli_refuses_and_writes_nothing(tmp_path: Path) -> None:
    recipe = tmp_path / "Dockerfile"
    recipe.write_text("FROM ubuntu:22.04\nCOPY ~/.ssh/id_rsa /opt/app/config\n")
    out = tmp_path / "env.yaml"
    result = CliRunner().invoke(main, ["import", str(recipe), "-o", str(out)])
    assert result.exit_code == 2 and f"{recipe}:2: COPY ~/.ssh/id_rsa /opt/app/config" in result.output
    assert "fix: " in result.output and not out.exists()
