"""`envbuild export --format def` keeps a post here-document working: its body and end marker are not
indented (an indented `EOF` never closes it), and the exported %post runs under sh as the spec's post does, each
post command in a subshell of its own."""

from __future__ import annotations

import subprocess
from pathlib import Path

from envbuild.convert.deffile import export_def, import_def
from envbuild.convert.specexport import ExportInput
from envbuild.envspec.loadspec import load_spec_text

SPEC = """\
name: heredocs
base: docker://ubuntu:22.04
post:
  - |-
    mkdir -p "$OUT/etc"
    cat > "$OUT/etc/app.conf" <<'EOF'
      indented = kept
    literal = $HOME
    EOF
    echo after >> "$OUT/etc/app.conf"
  - "cat > \\"$OUT/tabbed\\" <<-END\\n\\tone\\n\\tEND\\necho closed > \\"$OUT/closed\\""
"""


def _post_section(definition: str) -> str:
    return definition.split("\n%post\n", 1)[1].split("\n%test\n", 1)[0]


def test_exported_post_here_documents_close_and_run(tmp_path: Path) -> None:
    spec = load_spec_text(SPEC).spec
    definition = export_def(ExportInput(spec, "heredocs.yaml"))
    post = _post_section(definition)
    assert "\nEOF\n" in post and "\n  indented = kept\n" in post  # body and marker exactly as written
    syntax = subprocess.run(["sh", "-n"], input=post, capture_output=True, text=True, timeout=30)
    assert syntax.returncode == 0, syntax.stderr
    # run only the spec's own commands (the venv line before them would write to /opt)
    own = post[post.index('    (\n        mkdir -p "$OUT/etc"'):]
    ran = subprocess.run(["sh", "-ec", own], capture_output=True, text=True, timeout=30, env={"OUT": str(tmp_path), "HOME": "/nowhere"})
    assert ran.returncode == 0, ran.stderr
    assert (tmp_path / "etc/app.conf").read_text() == "  indented = kept\nliteral = $HOME\nafter\n"
    assert (tmp_path / "tabbed").read_text() == "one\n"
    assert (tmp_path / "closed").read_text() == "closed\n"


def test_a_def_exported_with_here_documents_imports_back_to_the_same_post() -> None:
    spec = load_spec_text(SPEC).spec
    back = load_spec_text(import_def(export_def(ExportInput(spec, "heredocs.yaml")), "heredocs").render("heredocs.def")).spec
    assert back.post == spec.post  # each step in its own ( ... ) block of the one %post, read back as one step
