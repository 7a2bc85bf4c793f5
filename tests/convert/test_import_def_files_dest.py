"""A definition file's `%files SRC DIR/` copies SRC into DIR, as Apptainer does: the imported spec's dest names
the file inside it (the build wrote a file named DIR before, and a later `ls DIR/SRC` failed)."""

from __future__ import annotations

from envbuild.convert.deffile import import_def
from envbuild.envspec.loadspec import load_spec_text

DEF = """\
Bootstrap: docker
From: ubuntu:22.04

%files
    data.txt /opt/tools/
    conf/ /etc/app/
    run.sh /opt/tools/run
"""


def test_a_files_destination_ending_in_a_slash_is_the_directory_the_source_goes_into() -> None:
    spec = load_spec_text(import_def(DEF, "tools").render("tools.def")).spec
    assert [(item.src, item.dest) for item in spec.files] == [
        ("data.txt", "/opt/tools/data.txt"), ("conf/", "/etc/app/conf"), ("run.sh", "/opt/tools/run")]
