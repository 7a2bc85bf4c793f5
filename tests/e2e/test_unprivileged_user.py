"""The e2e path as a cluster user runs it: never root. As the unprivileged account provision/users.sh makes
(ENVBUILD_TEST_USER, default envbuild-ci), in a project directory of its own with its own caches:
`envbuild build` of a venv overlay on a `localimage:` base, `envrun srun torchrun` in it exactly as written,
and `envrun sbatch --submit --wait`, on the real apptainer (no setuid starter: user namespaces) and the local
Slurm. The reference image is the base: a copy the user owns, as a user's own copy of a site image."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import OVERLAY_PACKAGE, OVERLAY_SPEC, REPO
from tests.e2e.test_ddp import check_two_ranks_agree

pytestmark = [pytest.mark.slow, pytest.mark.apptainer, pytest.mark.slurm]
USER = os.environ.get("ENVBUILD_TEST_USER", "envbuild-ci")


def _account() -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(USER)
    except KeyError:
        pytest.fail(f"no user {USER}: provision/users.sh makes it (bash provision/all.sh)", pytrace=False)


def as_user(account: pwd.struct_passwd, args: list[str], *, cwd: Path, timeout: int = 900,
            env_extra: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run `args` as `account` with a login-like environment: its own HOME (so its own caches), no root
    leftovers (no ENVBUILD_CACHE_DIR pointing at root's store, no XDG dirs of root's)."""
    # What a login shell on the cluster would carry too: the site's package index settings and proxies.
    env = {k: v for k, v in os.environ.items()
           if k in ("PATH", "LANG", "LC_ALL", "TERM", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE")
           or k.startswith(("PIP_", "UV_")) or k.lower().endswith("_proxy")}
    env.update(HOME=account.pw_dir, USER=account.pw_name, LOGNAME=account.pw_name, ENVRUN_IMAGE="", **(env_extra or {}))
    command = ["setpriv", f"--reuid={account.pw_uid}", f"--regid={account.pw_gid}", "--init-groups",
               "env", "-i", *(f"{k}={v}" for k, v in env.items()), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=cwd)


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A checkout the user can run: this one when the user can reach it (world-readable clone), else a copy of the
    tracked files and the .venv in a world-readable directory (CI may clone under a 0700 home)."""
    account = _account()
    probe = as_user(account, [str(REPO / ".venv/bin/python"), "-c", "import envbuild"], cwd=Path("/"), timeout=60)
    if probe.returncode == 0:
        yield REPO
        return
    copy = Path(tempfile.mkdtemp(prefix="envbuild-checkout-", dir="/var/tmp"))
    try:
        files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout.split(b"\0")
        for name in filter(None, files):
            target = copy / os.fsdecode(name)
            target.parent.mkdir(parents=True, exist_ok=True)
            if (REPO / os.fsdecode(name)).exists():
                shutil.copy2(REPO / os.fsdecode(name), target)
        subprocess.run(["cp", "-a", str(REPO / ".venv"), str(copy / ".venv")], check=True)
        subprocess.run(["chmod", "-R", "a+rX", str(copy)], check=True)
        yield copy
    finally:
        shutil.rmtree(copy, ignore_errors=True)


@pytest.fixture(scope="module")
def user_project(reference_image: Path, checkout: Path) -> Iterator[tuple[pwd.struct_passwd, Path]]:
    """A project directory owned by the user (0700, under /var/tmp like a scratch directory), holding its own copy
    of the reference image as base.sif and the DDP example."""
    account = _account()
    project = Path(tempfile.mkdtemp(prefix="envbuild-user-project-", dir="/var/tmp"))
    try:
        shutil.copy(reference_image, project / "base.sif")
        shutil.copy(REPO / "examples/ddp_minimal.py", project)
        (project / "extras.yaml").write_text(OVERLAY_SPEC)
        for path in [project, *project.iterdir()]:
            os.chown(path, account.pw_uid, account.pw_gid)
        os.chmod(project, 0o700)
        yield account, project
    finally:
        shutil.rmtree(project, ignore_errors=True)


def test_build_run_and_submit_as_an_unprivileged_user(user_project: tuple[pwd.struct_passwd, Path], checkout: Path) -> None:
    account, project = user_project
    assert account.pw_uid != 0
    envbuild, envrun = str(checkout / "bin/envbuild"), str(checkout / "bin/envrun")

    built = as_user(account, [envbuild, "build", "extras.yaml"], cwd=project)
    assert built.returncode == 0, built.stdout + built.stderr[-4000:]
    overlay = project / "extras.sqsh"
    assert overlay.is_file() and overlay.stat().st_uid == account.pw_uid, sorted(os.listdir(project))
    assert (project / "envrun.yaml").stat().st_uid == account.pw_uid
    # The user's own store, under its home: nothing of root's was used or written.
    assert any(Path(account.pw_dir).rglob("*")), "the build kept nothing in the user's own cache"

    script = project / "train_with_extras.py"
    script.write_text(f"import runpy, sys, {OVERLAY_PACKAGE}\n"
                      "assert sys.prefix == '/user-software', sys.prefix\n"
                      "runpy.run_path('ddp_minimal.py', run_name='__main__')\n")
    os.chown(script, account.pw_uid, account.pw_gid)
    ran = as_user(account, [envrun, "srun", "torchrun", script.name, "--steps", "20", "--json"], cwd=project, timeout=600)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    check_two_ranks_agree(ran.stdout)

    submitted = as_user(account, [envrun, "sbatch", "--system", "local", "--submit", "--wait", "--",
                                  "python", script.name, "--steps", "10", "--json"], cwd=project, timeout=600)
    assert submitted.returncode == 0, submitted.stdout + submitted.stderr
    job_id = submitted.stdout.splitlines()[0]
    assert job_id.isdigit(), submitted.stdout
    check_two_ranks_agree(submitted.stdout)
    owner = subprocess.run(["squeue", "--noheader", "-j", job_id, "-o", "%u"], capture_output=True, text=True).stdout.strip()
    accounted = subprocess.run(["scontrol", "show", "job", job_id], capture_output=True, text=True).stdout
    assert owner in ("", USER) and (not accounted or f"UserId={USER}(" in accounted), accounted
    # Everything the job wrote in the project is the user's.
    assert all(p.stat().st_uid == account.pw_uid for p in project.rglob("*")), \
        [str(p) for p in project.rglob("*") if p.stat().st_uid != account.pw_uid]
