"""The getting-started pages run as written, by a user who is not root, on the local cluster.

Every ```bash block of docs/getting-started/ runs in the order a new user reads the pages (install, first build,
first run), in one shell as the unprivileged account provision/users.sh makes (ENVBUILD_TEST_USER, default
envbuild-ci), in a workspace of its own: a fresh home, a copy of the checkout named `envbuild` (the page's
`cd envbuild`), and a scratch directory standing in for the project file system. Only paths are substituted
(`SUBSTITUTED_PATHS`); each command must exit 0, and where the page says what it shows, cheap checks look for it
(`EXPECTED`). A block that cannot run here starts with the line `# not run here: <reason>` (`NOT_RUN`), shown to
the reader as well.

No new image is built: the user's store (the page's `ENVBUILD_CACHE_DIR`) is seeded with the session's reference
build (its base and image entries, hard-linked), so the page's `envbuild build` of the reference spec is a store
hit; the user's pip configuration is the runner's, so the user's layer keys are the session's.
README.md's install is the install.md block that runs here, command for command.
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import subprocess
import tempfile
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO

USER = os.environ.get("ENVBUILD_TEST_USER", "envbuild-ci")
PAGES = ("install.md", "first-build.md", "first-run.md")  # the order a new user follows them
PAGE_DIR = REPO / "docs" / "getting-started"
NOT_RUN = re.compile(r"^# not run here: (?P<reason>\S.*)$")
# Paths of a site that this machine lacks, and what stands in for them in the workspace.
SUBSTITUTED_PATHS = {"/scratch/project_465000000": "{workspace}/scratch"}
# A user's PATH on a fresh Debian account: no sbin, nothing of the runner's.
USER_PATH = "/usr/local/bin:/usr/bin:/bin"
# What a login shell on the cluster would carry too: the site's package index settings, proxies, certificates.
_PASSED_ON = ("LANG", "LC_ALL", "TERM", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE")
# At most this many blocks may be exempt: each one is a part of the pages that no test runs.
MAX_NOT_RUN = 2


@dataclass(frozen=True)
class Command:
    page: str
    line: int  # of its first line in the page
    text: str  # as written, continuation lines kept


@dataclass(frozen=True)
class Block:
    page: str
    line: int
    commands: tuple[Command, ...]
    not_run: str | None  # the reason, for a block marked `# not run here:`


def page_blocks(page: str, text: str) -> list[Block]:
    """The ```bash blocks of a page with their commands (comment-only and blank lines left out)."""
    blocks: list[Block] = []
    lines = text.splitlines()
    number = 0
    while number < len(lines):
        if lines[number].strip() != "```bash":
            number += 1
            continue
        start, body = number + 1, []
        number += 1
        while number < len(lines) and not lines[number].startswith("```"):
            body.append((number + 1, lines[number]))
            number += 1
        number += 1
        reason = next((m.group("reason") for _, line in body[:1] if (m := NOT_RUN.match(line.strip()))), None)
        commands: list[Command] = []
        pending: list[str] = []
        first = 0
        for line_number, line in body:
            if not pending and (not line.strip() or line.lstrip().startswith("#")):
                continue
            if not pending:
                first = line_number
            pending.append(line)
            if not line.rstrip().endswith("\\"):
                commands.append(Command(page, first, "\n".join(pending)))
                pending = []
        blocks.append(Block(page, start, tuple(commands), reason))
    return blocks


def all_blocks() -> list[Block]:
    return [block for page in PAGES for block in page_blocks(page, (PAGE_DIR / page).read_text(encoding="utf-8"))]


def substitute_paths(command: str, workspace: Path) -> str:
    for site_path, stand_in in SUBSTITUTED_PATHS.items():
        command = command.replace(site_path, stand_in.format(workspace=workspace))
    return command


def journey_script(commands: list[Command], workspace: Path, log: Path) -> str:
    """One shell for the whole journey (a `cd` or `export` of one page holds for the next), each command as
    written in a group whose output and exit status go to log/N.*; the first failure ends it."""
    parts = ["#!/bin/bash", f"cd {workspace}"]
    for index, command in enumerate(commands):
        parts += [f"date +%s.%N >{log}/{index}.start",
                  "{", substitute_paths(command.text, workspace), f"}} >{log}/{index}.out 2>&1 </dev/null",
                  f"echo $? >{log}/{index}.rc",
                  f"date +%s.%N >{log}/{index}.end",
                  f'[ "$(cat {log}/{index}.rc)" = 0 ] || exit 1']
    return "\n".join(parts) + "\n"


@dataclass(frozen=True)
class Ran:
    command: Command
    status: int | None  # None: not reached, an earlier command failed
    output: str
    seconds: float


def _account() -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(USER)
    except KeyError:
        pytest.fail(f"no user {USER}: provision/users.sh makes it (bash provision/all.sh)", pytrace=False)


def _give(path: Path, account: pwd.struct_passwd) -> None:
    os.chown(path, account.pw_uid, account.pw_gid)


def _copy_checkout(target: Path, account: pwd.struct_passwd) -> None:
    """The checkout as a user clones it: the tracked files and the new ones not ignored (others' work in progress
    included, as a fresh clone of the commit would have it), no .venv, owned by the user."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True, check=True).stdout.split(b"\0")
    for name in filter(None, listed):
        source = REPO / os.fsdecode(name)
        if source.is_file() and not source.is_symlink():
            (target / os.fsdecode(name)).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / os.fsdecode(name))
    subprocess.run(["chown", "-R", f"{account.pw_uid}:{account.pw_gid}", str(target)], check=True)


def _link_entry(source: Path, target: Path, account: pwd.struct_passwd) -> None:
    """A store entry of the user's own: its directory and small files the user's, the big parts (an image, a
    base's root file system) hard links to the shared store's root-owned files, which a store only its owner can
    write may hold (docs/concepts/trust.md)."""
    target.mkdir()
    _give(target, account)
    for item in source.iterdir():
        if item.is_dir():
            subprocess.run(["cp", "-al", str(item), str(target / item.name)], check=True)
        elif item.stat().st_size > 1 << 20:
            try:
                os.link(item, target / item.name)
            except OSError:  # another file system than the shared store's
                shutil.copy2(item, target / item.name)
        else:
            shutil.copy2(item, target / item.name)
            _give(target / item.name, account)


def _seed_store(store: Path, build_cache: Path, image_name: str, account: pwd.struct_passwd) -> None:
    """The debootstrap bases and the reference spec's images of the shared store, in a store of the user's."""
    from envbuild.store.layout import COMPLETE, kind_dir

    for kind, pattern in (("base", "debootstrap-bookworm-*"), ("image", f"{image_name}-*")):
        kind_dir(store, kind).mkdir(parents=True, exist_ok=True)
        for entry in sorted(kind_dir(build_cache, kind).glob(pattern)):
            if (entry / COMPLETE).exists():
                _link_entry(entry, kind_dir(store, kind) / entry.name, account)
    for path in [store, *store.iterdir()]:
        _give(path, account)


def _user_home(home: Path, account: pwd.struct_passwd) -> None:
    """A fresh home holding the runner's own pip configuration: the user installs from the same sources, and its
    builds get the same layer keys as the session's."""
    home.mkdir()
    for relative in (".config/pip/pip.conf", ".pip/pip.conf"):
        source = Path.home() / relative
        if source.is_file():
            (home / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, home / relative)
    subprocess.run(["chown", "-R", f"{account.pw_uid}:{account.pw_gid}", str(home)], check=True)


def _user_environment(account: pwd.struct_passwd, home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k in _PASSED_ON or k.startswith(("PIP_", "UV_")) or k.lower().endswith("_proxy")}
    env.update(PATH=USER_PATH, HOME=str(home), USER=account.pw_name, LOGNAME=account.pw_name, SHELL="/bin/bash")
    return env


@pytest.fixture(scope="module")
def journey(reference_image: Path, build_cache: Path) -> Iterator[tuple[Path, list[Ran]]]:
    """The workspace and every command of the pages, run (or not reached) as the user."""
    account = _account()
    workspace = Path(tempfile.mkdtemp(prefix="envbuild-docs-", dir=build_cache.parent))
    try:
        _give(workspace, account)
        os.chmod(workspace, 0o700)
        (workspace / "envbuild").mkdir()
        _copy_checkout(workspace / "envbuild", account)
        _user_home(workspace / "home", account)
        (workspace / "scratch").mkdir()
        _seed_store(workspace / "scratch" / "envbuild-store", build_cache, reference_image.stem, account)
        _give(workspace / "scratch", account)
        log = workspace / "log"
        log.mkdir()
        _give(log, account)
        commands = [c for block in all_blocks() if block.not_run is None for c in block.commands]
        script = workspace / "journey.sh"
        script.write_text(journey_script(commands, workspace, log))
        env = _user_environment(account, workspace / "home")
        shell = subprocess.run(["setpriv", f"--reuid={account.pw_uid}", f"--regid={account.pw_gid}", "--init-groups",
                                "env", "-i", *(f"{k}={v}" for k, v in env.items()), "bash", str(script)],
                               cwd=workspace, capture_output=True, text=True, timeout=1200)
        if not (log / "0.rc").exists():
            pytest.fail(f"the journey did not start as {USER} (exit {shell.returncode}): {shell.stderr[-2000:]}",
                        pytrace=False)
        ran = []
        for index, command in enumerate(commands):
            status_file = log / f"{index}.rc"
            status = int(status_file.read_text()) if status_file.exists() else None
            output = (log / f"{index}.out").read_text(errors="replace") if (log / f"{index}.out").exists() else ""
            times = [log / f"{index}.{end}" for end in ("start", "end")]
            seconds = float(times[1].read_text()) - float(times[0].read_text()) if all(t.exists() for t in times) else 0.0
            ran.append(Ran(command, status, output, seconds))
        # Where the journey's time goes (pytest -s, or -rA), to keep it within CI's budget.
        print("".join(f"{r.seconds:6.1f} s  {r.command.page}:{r.command.line}  {r.command.text.split('  #')[0]}\n"
                      for r in ran if r.status is not None))
        yield workspace, ran
    finally:
        # In the background: removing the user's venv and images takes seconds that the next tests need not wait for.
        subprocess.Popen(["rm", "-rf", "--one-file-system", str(workspace)], start_new_session=True,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


# What a page says a command shows, checked where it is cheap: (page, a pattern the command matches, a check of
# its output and the workspace, what the page promises).
def _ddp_agrees(output: str, workspace: Path) -> bool:
    return "world size 2" in output and "PARAMETERS AGREE" in output


def _torch_version(output: str, workspace: Path) -> bool:
    spec = yaml.safe_load((REPO / "envs/local-cpu-pytorch.yaml").read_text())
    return any(line.startswith(spec["python"]["pytorch"]["version"] + "+") for line in output.splitlines())


def _wheel_has_recipes(output: str, workspace: Path) -> bool:
    wheels = sorted((workspace / "envbuild" / "dist").glob("envbuild-*-py3-none-any.whl"))
    return len(wheels) == 1 and any(name.startswith("envbuild/_recipes/") and name.endswith(".yaml")
                                    for name in zipfile.ZipFile(wheels[0]).namelist())


def _image_with_wrappers(output: str, workspace: Path) -> bool:
    checkout = workspace / "envbuild"
    return ("taken from the store" in output or "up to date" in output) and all(
        (checkout / name).exists() for name in ("local-cpu-pytorch.sif", "local-cpu-pytorch.sif.build.log",
                                                "bin/python", "bin/torchrun", "envrun.yaml"))


EXPECTED: list[tuple[str, str, Callable[[str, Path], bool], str]] = [
    ("install.md", r"--version", lambda out, _: "envbuild, version" in out and "envrun, version" in out,
     "both commands print their version"),
    ("install.md", r"^pip wheel", _wheel_has_recipes, "one wheel in dist/, carrying the recipes as envbuild/_recipes"),
    ("first-build.md", r"--dry-run", lambda out, _: out.startswith("# lock: "), "the first line says which lock applies"),
    ("first-build.md", r"^envbuild build \S+\s+#", _image_with_wrappers,
     "./local-cpu-pytorch.sif, its build log, bin/ wrappers and ./envrun.yaml (a store hit: no new build)"),
    ("first-build.md", r" -o ", lambda _, ws: (ws / "scratch/images/local-cpu-pytorch.sif").is_file(),
     "the image at the -o path"),
    ("first-build.md", r"^envbuild verify", lambda out, _: "result: the image matches" in out, "the image matches"),
    ("first-build.md", r"^envbuild lock", lambda out, _: "wrote envs/local-cpu-pytorch.lock" in out,
     "the lock written next to the spec"),
    ("first-run.md", r"print\(torch.__version__\)", _torch_version, "the spec's torch version"),
    ("first-run.md", r"^(?!.*--dry-run)(?!envrun sbatch (-- |-o )).*ddp_minimal", _ddp_agrees,
     "two ranks that train together"),
    ("first-run.md", r"^envrun --dry-run", lambda out, _: re.search(r"^exec srun --ntasks-per-node=2 ", out, re.M)
     is not None and 'RANK="$SLURM_PROCID"' in out, "the launch as a script: one task per CPU, RANK from Slurm"),
    ("first-run.md", r"^envrun sbatch -- ", lambda out, _: "#!/bin/bash" in out and "#SBATCH " in out,
     "the batch script"),
    ("first-run.md", r"-o train.sbatch", lambda _, ws: (ws / "envbuild/train.sbatch").is_file(), "train.sbatch written"),
    ("first-run.md", r"--check", lambda out, _: "clean for local" in out, "the script is clean for the site"),
    ("first-run.md", r"--submit --wait", lambda out, _: re.search(r"^\d+$", out, re.M) is not None,
     "the job id, then its output"),
]


def test_pages_mark_what_does_not_run_with_a_reason() -> None:
    blocks = all_blocks()
    assert {block.page for block in blocks} == set(PAGES), "a getting-started page without a ```bash block"
    exempt = [f"{b.page}:{b.line}: {b.not_run}" for b in blocks if b.not_run is not None]
    assert len(exempt) <= MAX_NOT_RUN, f"more blocks exempt than {MAX_NOT_RUN}: {exempt}"
    assert all(block.commands for block in blocks), [f"{b.page}:{b.line}" for b in blocks if not b.commands]
    text = "\n".join((PAGE_DIR / page).read_text(encoding="utf-8") for page in PAGES)
    marked_elsewhere = [line for line in text.splitlines() if "not run here" in line and not NOT_RUN.match(line.strip())]
    assert not marked_elsewhere, f"`# not run here: <reason>` counts only as a block's first line: {marked_elsewhere}"


def test_only_paths_are_substituted() -> None:
    workspace = Path("/var/tmp/envbuild-docs-x")
    for block in all_blocks():
        for command in block.commands:
            changed = substitute_paths(command.text, workspace)
            for site_path, stand_in in SUBSTITUTED_PATHS.items():
                changed = changed.replace(stand_in.format(workspace=workspace), site_path)
            assert changed == command.text, f"{command.page}:{command.line}"


def test_every_expectation_names_a_command_that_runs() -> None:
    commands = [c for block in all_blocks() if block.not_run is None for c in block.commands]
    for page, pattern, _, promise in EXPECTED:
        assert any(c.page == page and re.search(pattern, c.text) for c in commands), f"{page}: {pattern} ({promise})"


def _install_commands(text: str, heading: str) -> list[str]:
    section = text[text.index(heading):]
    block = page_blocks("", section)[0]
    return [re.sub(r"\s+#.*$", "", c.text).strip() for c in block.commands]


def test_readme_install_is_the_one_that_runs() -> None:
    """The README's install for a user is install.md's, which the journey runs (a venv: PEP 668 systems refuse
    `pip install --user`)."""
    readme = _install_commands((REPO / "README.md").read_text(encoding="utf-8"), "## Install")
    page = _install_commands((PAGE_DIR / "install.md").read_text(encoding="utf-8"), "## From a checkout")
    assert readme == page
    assert not any("--user" in command for command in readme)


@pytest.mark.slow
@pytest.mark.apptainer
@pytest.mark.slurm
@pytest.mark.network  # the install and the lock reach PyPI through the host's pip configuration
@pytest.mark.parametrize("page", PAGES)
def test_page_runs_as_a_user(page: str, journey: tuple[Path, list[Ran]]) -> None:
    workspace, ran = journey
    failed = next((r for r in ran if r.status not in (0, None)), None)
    stop = f"; the journey stopped at {failed.command.page}:{failed.command.line}" if failed else ""
    for run in (r for r in ran if r.command.page == page):
        where = f"{page}:{run.command.line}: {run.command.text}"
        assert run.status is not None, f"not reached{stop}: {where}"
        assert run.status == 0, f"exit {run.status}: {where}\n{run.output[-6000:]}"
    for expected_page, pattern, check, promise in EXPECTED:
        if expected_page != page:
            continue
        for run in (r for r in ran if r.command.page == page and re.search(pattern, r.command.text)):
            assert check(run.output, workspace), f"{page}:{run.command.line}: not shown: {promise}\n{run.output[-4000:]}"
