"""`envrun sbatch --check FILE` on a file that is not a batch script (issue 28: a binary file was "clean"):
binary content, text that is not UTF-8, or text that neither starts with #! nor has an #SBATCH line and that
bash cannot parse is refused (exit 2, what and how to fix); a script without the #! line sbatch needs is a
finding."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from envbuild.cli import envrun_main
from envbuild.recipes.loadrecipe import load_recipe
from envbuild.shared.errors import UsageError
from envbuild.slurm.check.pitfalls import check_script, check_script_file


def check(path: Path) -> tuple[int, str]:
    import io

    out = io.StringIO()
    return check_script_file(str(path), load_recipe("local"), out, {}), out.getvalue()


def test_a_program_is_refused_not_called_clean(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    program = tmp_path / "true"
    shutil.copy("/bin/true", program)
    with pytest.raises(SystemExit) as done:
        envrun_main.main(["sbatch", "--system", "local", "--check", str(program)])
    assert done.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert f"error: --check {program}: a binary file (a NUL byte at offset " in captured.err
    assert "not a shell script" in captured.err and "fix: give the batch script" in captured.err


@pytest.mark.parametrize(("content", "says"), [
    (b"#!/bin/bash\n#SBATCH -N 1\n\x00srun x\n", "a binary file (a NUL byte at offset 25)"),
    (b"#!/bin/bash\necho \xff\xfe\n", "not text (bytes that are not UTF-8 at offset 17)"),
    (b"\x89PNG\r\n\x1a\n....", "not text (bytes that are not UTF-8 at offset 0)"),
    (b"if then ((( fi\n", "not a shell script (no #! line, no #SBATCH line, and bash -n says: "),
    (b"<html><body>job</body></html>\n", "not a shell script"),
])
def test_files_that_are_not_shell_scripts_are_refused(tmp_path: Path, content: bytes, says: str) -> None:
    path = tmp_path / "job.sh"
    path.write_bytes(content)
    with pytest.raises(UsageError) as info:
        check(path)
    assert info.value.message.startswith(f"--check {path}: {says}")
    assert "clean" not in info.value.message


def test_a_script_without_its_interpreter_line_is_a_finding(tmp_path: Path) -> None:
    path = tmp_path / "job.sh"
    path.write_text("#SBATCH --nodes=1\nsrun hostname\n")
    code, report = check(path)
    assert code == 1
    assert report.startswith(f"{path}: local rules\n{path}:1: the first line is not #! and an interpreter\n")
    assert "  fix: #!/bin/bash as the first line\n" in report


def test_plain_shell_text_without_the_interpreter_line_is_a_finding_not_an_error(tmp_path: Path) -> None:
    path = tmp_path / "job.sh"
    path.write_text("echo hello\n")
    code, report = check(path)
    assert code == 1 and "the first line is not #!" in report


def test_a_real_script_is_still_clean() -> None:
    report = check_script("#!/bin/bash\n#SBATCH --nodes=1\nsrun hostname\n", load_recipe("local"), {})
    assert report.findings == ()
