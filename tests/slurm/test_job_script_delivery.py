"""The job script reaches sbatch as planned (issue 40): on sbatch's standard input, never read back by name from
.envrun/jobs/ (a group project's member could swap it between the write and the submission), and .envrun/jobs
made by someone else, or a link, is refused. `-o` writes through envbuild.shared.safefiles: `-` is standard output,
/dev/null stays a device, a link planted at the name in a shared directory is replaced, never written through."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import pytest

from envbuild.cli import envrun_main
from envbuild.commands.sbatch import submit_text
from envbuild.slurm.batch.submit import wait_for_job
from tests.support.trust_accounts import stranger

# A stand-in sbatch that first does what the attacker did (replace every record in .envrun/jobs/ with their own
# script), then reads the script as sbatch would: the file named on its command line, else its standard input.
FAKE_SBATCH = """#!/bin/bash
for record in .envrun/jobs/*.sbatch; do
  [ -e "$record" ] && printf '#!/bin/bash\\necho the attackers job\\n' > "$record"
done
args=()
for word in "$@"; do [ "$word" = --parsable ] || args+=("$word"); done
printf '%s\\n' "${args[@]}" > "$SBATCH_SEEN.argv"
if [ "${#args[@]}" -gt 0 ]; then cat "${args[-1]}" > "$SBATCH_SEEN"; else cat > "$SBATCH_SEEN"; fi
echo 4242
"""


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    work = tmp_path / "project"
    work.mkdir()
    work.chmod(0o777)  # a directory others may write, as a group project (2770) is to its members
    (work / "env.sif").write_bytes(b"")
    (work / "train.py").write_text("print('trained')\n")  # envrun sbatch --submit refuses a program that is not there
    monkeypatch.chdir(work)
    monkeypatch.setenv("ENVRUN_TRUST_DIR", str(work))  # the user's group project, trusted for its env.sif
    monkeypatch.setenv("ENVRUN_CONFIG", str(tmp_path / "envrun-config.yaml"))
    (tmp_path / "envrun-config.yaml").write_text("batch: {time: '00:05:00'}\n")
    for name in ("SBATCH_ACCOUNT", "SLURM_ACCOUNT", "ENVRUN_IMAGE", "SLURM_JOB_ID"):
        monkeypatch.delenv(name, raising=False)
    return work


def sbatch(*argv: str) -> int:
    with pytest.raises(SystemExit) as done:
        envrun_main.main(["sbatch", "--system", "local", *argv])
    return int(done.value.code or 0)


@pytest.fixture
def fake_sbatch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text(FAKE_SBATCH)
    (bin_dir / "sbatch").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    seen = tmp_path / "submitted"
    monkeypatch.setenv("SBATCH_SEEN", str(seen))
    return seen


def test_the_submitted_script_is_the_planned_one_even_when_the_record_is_swapped(
        project: Path, fake_sbatch: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert sbatch("--submit", "--", "python", "train.py") == 0
    out, err = capsys.readouterr()
    assert out.splitlines()[0] == "4242"
    submitted = fake_sbatch.read_text()
    assert "the attackers job" not in submitted and "srun torchrun train.py" in submitted
    assert Path(f"{fake_sbatch}.argv").read_text().strip() == "", "no file argument: sbatch reads its stdin"
    record = next((project / ".envrun/jobs").glob("train-*.sbatch"))
    assert f"submitted job 4242 (.envrun/jobs/{record.name};" in err


@pytest.mark.parametrize("planted", ["envrun_dir", "jobs_dir", "jobs_link"])
def test_jobs_directory_made_by_another_member_or_a_link_is_refused(
        project: Path, fake_sbatch: Path, tmp_path: Path, planted: str, capsys: pytest.CaptureFixture[str]) -> None:
    if os.geteuid() != 0:
        pytest.skip("a stranger's directory needs root to plant (CI runs the tests as root)")
    account = stranger()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (project / ".envrun").mkdir()
    if planted == "envrun_dir":
        os.chown(project / ".envrun", account.pw_uid, account.pw_gid)
        (project / ".envrun").chmod(0o777)
    elif planted == "jobs_dir":
        (project / ".envrun").chmod(0o777)
        (project / ".envrun/jobs").mkdir()
        os.chown(project / ".envrun/jobs", account.pw_uid, account.pw_gid)
    else:
        (project / ".envrun/jobs").symlink_to(elsewhere)
    assert sbatch("--submit", "--", "python", "train.py") != 0
    err = capsys.readouterr().err
    assert ("belongs to another user" in err or "is a symbolic link" in err) and "fix:" in err, err
    assert not fake_sbatch.exists(), "nothing was submitted"
    assert list(elsewhere.iterdir()) == []


def test_o_dash_prints_the_script(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert sbatch("-o", "-", "--", "python", "train.py") == 0
    out = capsys.readouterr().out
    assert out.startswith("#!/bin/bash\n") and not (project / "-").exists()


def test_o_dev_null_leaves_the_device_a_device(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert sbatch("-o", "/dev/null", "--", "python", "train.py") == 0
    info = os.stat("/dev/null")
    assert stat.S_ISCHR(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o666


@pytest.mark.parametrize("name", ["train.sbatch", "sub/train.sbatch"])
def test_o_replaces_a_planted_link_and_never_writes_through_it(project: Path, tmp_path: Path, name: str) -> None:
    victim = tmp_path / "victims-file"
    victim.write_text("keep me\n")
    victim.chmod(0o600)
    target = project / name
    target.parent.mkdir(exist_ok=True)
    target.parent.chmod(0o777)
    target.symlink_to(victim)
    assert sbatch("-o", name, "--", "python", "train.py") == 0
    assert victim.read_text() == "keep me\n" and stat.S_IMODE(victim.stat().st_mode) == 0o600
    assert not target.is_symlink() and target.read_text().startswith("#!/bin/bash\n")


@pytest.mark.slurm
def test_the_real_sbatch_runs_the_planned_text_not_the_file_beside_it(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    tmp_path.chmod(0o755)
    record = tmp_path / "job.sbatch"
    record.write_text("#!/bin/bash\necho the attackers job\n")  # what a member swapped in after the write
    planned = "#!/bin/bash\n#SBATCH --output=job-%j.out\n#SBATCH --time=1\necho the planned job\n"
    job_id = submit_text(planned, str(record))
    deadline = time.monotonic() + 120
    assert wait_for_job(job_id, str(tmp_path), timeout_s=120, poll_s=0.5) == 0
    output = tmp_path / f"job-{job_id}.out"
    while not output.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert output.read_text() == "the planned job\n"
