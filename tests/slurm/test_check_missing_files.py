"""A program file (or a config file it names) that is not where the job starts is found before the queue
(issue 38): a finding of `envrun sbatch --check`, and an error of `envrun sbatch --submit`."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from envbuild.cli import envrun_main
from envbuild.launch.visibility import files_opened_at_start
from envbuild.recipes.loadrecipe import load_recipe
from envbuild.slurm.check.pitfalls import check_script
from envbuild.slurm.check.rulebase import FileProbe

HEAD = "#!/bin/bash\n#SBATCH --time=00:10:00\n#SBATCH --nodes=1\n"


def missing(text: str, start: Path) -> list[tuple[int, str]]:
    report = check_script(text, load_recipe("local"), {}, syntax_error=None,
                          files=FileProbe(str(start), os.path.exists))
    return [(f.line, f.what) for f in report.findings if f.rule == "program_missing"]


@pytest.mark.parametrize(("words", "files"), [
    (("python", "train.py", "--config", "run.yaml"), ["train.py", "run.yaml"]),
    (("torchrun", "--nproc-per-node=4", "train.py", "--config=cfg/a.json"), ["train.py", "cfg/a.json"]),
    (("python", "-m", "torch.distributed.run", "--nproc-per-node", "2", "train.py"), ["train.py"]),
    (("python", "-m", "mypackage.train"), []),  # a module: no file
    (("python", "$SCRIPT"), []),  # decided when the job runs
    (("python", "train.py", "--config", "experiment"), ["train.py"]),  # not a file by its ending
])
def test_the_files_a_command_opens_at_once(words: tuple[str, ...], files: list[str]) -> None:
    assert files_opened_at_start(words) == files


def test_a_misspelt_program_and_a_missing_config_are_findings(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("")
    found = missing(HEAD + "srun python trian.py --config conf/run.yaml\n", tmp_path)
    assert [line for line, _what in found] == [4, 4]
    assert found[0][1] == (f"trian.py: no such file where the job starts (looked at {tmp_path}/trian.py, from the "
                           "directory sbatch is run from, taken to be here)")
    assert missing(HEAD + "srun python train.py\n", tmp_path) == []


def test_the_directory_comes_from_cd_or_chdir_and_an_unknown_cd_stands_back(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "train.py").write_text("")
    assert missing(HEAD + f"cd {tmp_path}/sub\nsrun python train.py\n", tmp_path) == []
    assert missing(HEAD + f"#SBATCH --chdir={tmp_path}/sub\nsrun python train.py\n", tmp_path) == []
    assert missing(HEAD + "cd $WORKDIR\nsrun python train.py\n", tmp_path) == []  # not known here
    assert [line for line, _ in missing(HEAD + "srun python train.py\n", tmp_path)] == [4]


def test_an_absolute_path_in_a_container_may_be_the_images_own(tmp_path: Path) -> None:
    text = HEAD + "srun singularity exec img.sif python /opt/app/train.py\nsrun python /opt/app/train.py\n"
    assert [line for line, _ in missing(text, tmp_path)] == [5]  # the host line only


def test_without_a_file_probe_nothing_is_looked_at() -> None:
    report = check_script(HEAD + "srun python nowhere.py\n", load_recipe("local"), {}, syntax_error=None)
    assert [f for f in report.findings if f.rule == "program_missing"] == []


def test_submit_refuses_a_program_that_is_not_there(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ENVRUN_CONFIG", str(tmp_path / "envrun-config.yaml"))
    (tmp_path / "envrun-config.yaml").write_text("{}\n")
    (tmp_path / "env.sif").write_bytes(b"")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text("#!/bin/sh\ntouch \"$SUBMITTED\"\necho 1\n")
    (bin_dir / "sbatch").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("SUBMITTED", str(tmp_path / "submitted"))
    with pytest.raises(SystemExit) as done:
        envrun_main.main(["sbatch", "--system", "local", "--image", "env.sif", "--time", "00:05:00", "--submit", "--",
                          "python", "trian.py"])
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert f"the job would open a file that does not exist: trian.py (looked at {tmp_path}/trian.py)" in err
    assert "fix: " in err and not (tmp_path / "submitted").exists()
