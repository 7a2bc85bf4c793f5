"""The job report's files in a directory the project's members share (issue 40): the report directory's name
(OUTPUT.report beside the job's output) planted as a link or made by another user is refused, and a link planted
at a file's name or at its partial names is replaced, never written through (the victim's ~/.bashrc stays). And the
page escapes every value a record or the command brings, in the sortable table's cells and attributes too."""

from __future__ import annotations

import os
from html import escape
from pathlib import Path

import pytest

from envbuild.report import reportrender as render
from envbuild.report.reportrender import render_html, write_report
from envbuild.shared.safefiles import UnsafePlaceError
from tests.report.test_collect import replay
from tests.report.test_render import cpu_only_step
from tests.support.trust_accounts import stranger

NAMES = ("report.json", "report.html", "timeline.png", "summary.txt")


@pytest.fixture
def shared(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(render, "render_png", lambda report: b"\x89PNG\r\n\x1a\nnot drawn here")
    directory = tmp_path / "project"
    directory.mkdir()
    directory.chmod(0o777)  # the job's directory, as a group project is to its members
    return directory


@pytest.fixture
def bashrc(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    (home / ".bashrc").write_text("export EDITOR=vi\n")
    return home / ".bashrc"


def test_a_report_directory_planted_as_a_link_is_refused(shared: Path, bashrc: Path) -> None:
    (shared / "train-7.report").symlink_to(bashrc.parent)
    with pytest.raises(UnsafePlaceError, match="is a symbolic link") as refused:
        write_report(replay("two-nodes.stream"), str(shared / "train-7.report"))
    assert refused.value.hint  # the fix
    assert sorted(p.name for p in bashrc.parent.iterdir()) == [".bashrc"]


def test_a_report_directory_made_by_another_user_is_refused(shared: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("a stranger's directory needs root to plant (CI runs the tests as root)")
    planted = shared / "train-7.report"
    planted.mkdir(mode=0o777)
    os.chown(planted, stranger().pw_uid, stranger().pw_gid)
    with pytest.raises(UnsafePlaceError, match="belongs to another user"):
        write_report(replay("two-nodes.stream"), str(planted))
    assert list(planted.iterdir()) == []


def test_links_at_the_files_and_their_partial_names_are_never_written_through(shared: Path, bashrc: Path) -> None:
    directory = shared / "train-7.report"
    directory.mkdir()
    directory.chmod(0o777)  # the victim's own report directory, writable by the group
    for name in NAMES:
        (directory / name).symlink_to(bashrc)
        for pid in range(os.getpid(), os.getpid() + 50):  # the old partial names, .NAME.partial-PID
            (directory / f".{name}.partial-{pid}").symlink_to(bashrc)
    written = write_report(replay("two-nodes.stream"), str(directory))
    assert [Path(p).name for p in written] == list(NAMES)
    assert bashrc.read_text() == "export EDITOR=vi\n"
    for name in NAMES:
        assert not (directory / name).is_symlink() and (directory / name).stat().st_size > 0


HOSTILE = '"><img src=x onerror=alert(1)><script>alert(2)</script>'


def test_the_page_escapes_what_records_and_the_command_bring() -> None:
    report = cpu_only_step()
    report.command = ["python", HOSTILE]
    report.job["name"] = HOSTILE
    report.nodes[0].node = HOSTILE
    report.nodes[0].gpu_sampling = HOSTILE
    for rank in report.ranks:
        rank.node = HOSTILE
        rank.cpu_source = HOSTILE
    report.not_measured = [f"GPUs on {HOSTILE}: none"]
    page = render_html(report, None, HOSTILE)
    assert HOSTILE not in page and "<img" not in page and "alert(2)</script>" not in page
    assert page.count("<script>") == 1  # the page's own sorting script, nothing else
    assert f'<td data-v="{escape(HOSTILE)}">{escape(HOSTILE)}</td>' in page  # the node cell, sorted by its text
    assert f"<p>No GPU was measured: GPUs on {escape(HOSTILE)}: none</p>" in page
