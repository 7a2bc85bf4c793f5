"""A victim and an attacker who share a project group (issue 40): the tests in tests/hostile/ act as both.

The victim is the unprivileged account (tests/support/trust_accounts.unprivileged), the attacker the stranger;
both belong to the group GROUP (provision/users.sh makes it; `project_group` makes it when missing). A Scene is
one fresh world for one run: a private home for the victim (0700, with a canary tree: files and directories
whose every byte, mode and mtime `snapshot` records) and a group directory (setgid 2770, as the docs recommend for
a project, a build store, a report directory or a Jupyter prefix) that the attacker may write. The attacker
plants links (`plant_link`) and directories there; the tests then run the victim's command (`Scene.run`), under
strace when asked (`trace_effects` reads what it created, renamed, removed or changed).

Everything here needs root (CI runs the tests as root): switching users is setpriv, planting is a chown.
"""

from __future__ import annotations

import grp
import hashlib
import os
import pwd
import re
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.support.trust_accounts import stranger, unprivileged

GROUP = os.environ.get("ENVBUILD_TEST_GROUP", "envbuild-proj")
ENVBUILD = str(REPO / "bin/envbuild")
ENVRUN = str(REPO / "bin/envrun")
PYTHON = str(REPO / ".venv/bin/python") if (REPO / ".venv/bin/python").exists() else "python3"
# The syscalls that create, replace, remove or change a name or what it holds (strace -e trace=...).
TRACED = ("open,openat,openat2,creat,mkdir,mkdirat,rename,renameat,renameat2,unlink,unlinkat,rmdir,symlink,"
          "symlinkat,link,linkat,chmod,fchmod,fchmodat,chown,fchown,fchownat,lchown,truncate")
_WRITE_FLAGS = ("O_WRONLY", "O_RDWR", "O_CREAT", "O_TRUNC")

# Stand-ins the victim's PATH finds first: sbatch answers a job id as `sbatch --parsable` does, apptainer
# answers `envrun kernel install`'s probe (a Python with ipykernel) without starting a container.
FAKE_SBATCH = "#!/bin/sh\necho 4242\n"
FAKE_APPTAINER = """#!/bin/sh
case "$1" in --version|version) echo "apptainer version 1.3.4"; exit 0;; esac
printf 'ENVRUN-PROBE {"python": "/usr/bin/python3", "version": "3.11.2", "ipykernel": true}\\n'
"""


def victim() -> pwd.struct_passwd:
    return unprivileged()


def attacker() -> pwd.struct_passwd:
    return stranger()


def project_group() -> grp.struct_group:
    """The group both users belong to, made (and both added) when missing: provision/users.sh does the same."""
    if os.geteuid() != 0:
        pytest.fail("the attacker-and-victim tests need root (CI runs the tests as root)", pytrace=False)
    try:
        grp.getgrnam(GROUP)
    except KeyError:
        subprocess.run(["groupadd", GROUP], check=True, capture_output=True)
    for account in (victim(), attacker()):
        if account.pw_name not in grp.getgrnam(GROUP).gr_mem:
            subprocess.run(["gpasswd", "-a", account.pw_name, GROUP], check=True, capture_output=True)
    return grp.getgrnam(GROUP)


def give(path: Path, account: pwd.struct_passwd, *, gid: int | None = None, mode: int | None = None) -> Path:
    """`path` (not followed when a link) handed to `account`, with the project group when `gid` is given."""
    os.lchown(path, account.pw_uid, account.pw_gid if gid is None else gid)
    if mode is not None and not path.is_symlink():
        path.chmod(mode)
    return path


def give_tree(root: Path, account: pwd.struct_passwd, gid: int, *, dir_mode: int = 0o2770,
              file_mode: int = 0o660) -> None:
    """Everything under `root` (and root) to `account` and the group, group-writable as under umask 007."""
    for path in [root, *root.rglob("*")]:
        if path.is_symlink():
            os.lchown(path, account.pw_uid, gid)
        else:
            give(path, account, gid=gid, mode=dir_mode if path.is_dir() else file_mode)


# --- the canary: what the attacker must not be able to touch through the victim ---------------------------

CANARY_FILES = {
    "thesis.tex": "\\documentclass{article} the victim's thesis\n",
    ".bashrc": "# the victim's shell start-up\nexport EDITOR=vi\n",
    "data/results.csv": "epoch,loss\n1,0.5\n",
    "data/raw/batch-0001.bin": "\x00\x01binary-ish\n",
    "Documents/notes.md": "# notes\n",
    ".ssh/id_rsa": "-----BEGIN OPENSSH PRIVATE KEY-----\ncanary\n-----END OPENSSH PRIVATE KEY-----\n",
}


def snapshot(root: Path) -> dict[str, tuple[object, ...]]:
    """Every name under `root` (root included): kind, mode, size, mtime, and a file's sha256 or a link's target.
    Two snapshots differ when anything under `root` was created, removed, renamed, written or chmod'ed."""
    seen: dict[str, tuple[object, ...]] = {}
    for directory, dirs, files in os.walk(root):
        for name in ["", *dirs, *files]:
            path = os.path.join(directory, name) if name else directory
            info = os.lstat(path)
            if stat.S_ISREG(info.st_mode):
                detail: object = hashlib.sha256(Path(path).read_bytes()).hexdigest()
            elif stat.S_ISLNK(info.st_mode):
                detail = os.readlink(path)
            else:
                detail = ""
            size = info.st_size if not stat.S_ISDIR(info.st_mode) else 0
            seen[os.path.relpath(path, root)] = (stat.filemode(info.st_mode), info.st_uid, size, info.st_mtime_ns, detail)
    return seen


def changes(before: dict[str, tuple[object, ...]], after: dict[str, tuple[object, ...]]) -> list[str]:
    """What differs, one line per name."""
    lines = [f"removed {name}" for name in sorted(before.keys() - after.keys())]
    lines += [f"created {name}" for name in sorted(after.keys() - before.keys())]
    lines += [f"changed {name}: {before[name]} -> {after[name]}" for name in sorted(before.keys() & after.keys())
              if before[name] != after[name]]
    return lines


# --- a scene: one fresh world for one run ------------------------------------------------------------------

@dataclass
class Scene:
    """A victim's private home (with its canary tree and a bin/ of stand-ins) and a group directory beside it.
    `shared` is the victim's, setgid, group GROUP, mode 2770: both users may create and remove names in it."""

    base: Path
    home: Path
    canary: Path
    bin: Path
    shared: Path
    gid: int
    env: dict[str, str] = field(default_factory=dict)

    @property
    def canary_dir(self) -> Path:
        return self.canary / "data"

    @property
    def canary_file(self) -> Path:
        return self.canary / "thesis.tex"

    def mkdir_shared(self, relative: str, *, owner: pwd.struct_passwd | None = None, mode: int = 0o2770) -> Path:
        """A directory under `shared` (parents too), the victim's unless `owner` says otherwise."""
        path = self.shared
        for part in Path(relative).parts:
            path = path / part
            if not path.exists():
                path.mkdir()
                give(path, owner or victim(), gid=self.gid, mode=mode)
        return path

    def write_shared(self, relative: str, text: str, *, owner: pwd.struct_passwd | None = None,
                     mode: int = 0o660) -> Path:
        """A file under `shared`, written as root and handed to `owner` (the victim by default)."""
        path = self.shared / relative
        if not path.parent.exists():
            self.mkdir_shared(str(Path(relative).parent))
        path.write_text(text)
        return give(path, owner or victim(), gid=self.gid, mode=mode)

    def command(self, args: list[str], *, env: dict[str, str] | None = None, umask: str = "007") -> list[str]:
        """`args` as the victim would run them: its uid, its groups (GROUP too), a login-like environment with
        HOME in the scene, the stand-ins first on PATH, umask 007 (a group project, as the docs recommend)."""
        account = victim()
        environ = {"PATH": f"{self.bin}:/usr/local/bin:/usr/bin:/bin", "HOME": str(self.home),
                   "USER": account.pw_name, "LOGNAME": account.pw_name, "ENVBUILD_SYSTEM": "local", "LANG": "C.UTF-8",
                   **self.env, **(env or {})}
        return ["setpriv", f"--reuid={account.pw_uid}", f"--regid={account.pw_gid}", "--init-groups",
                "env", "-i", *(f"{k}={v}" for k, v in environ.items()),
                "sh", "-c", f'umask {umask}; exec "$@"', "victim", *args]

    def run(self, args: list[str], *, cwd: Path | None = None, env: dict[str, str] | None = None,
            trace: Path | None = None, timeout: int = 120) -> subprocess.CompletedProcess[str]:
        """Run `args` as the victim in `cwd` (default: the group directory); with `trace`, under strace writing
        there (the syscalls of TRACED, every process, descriptors decoded to their paths)."""
        argv = self.command(args, env=env)
        if trace is not None:
            argv = ["strace", "-f", "-qq", "-y", "-s", "4096", "-o", str(trace), "-e", f"trace={TRACED}", *argv]
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=cwd or self.shared)

    def run_as_attacker(self, args: list[str], *, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        account = attacker()
        argv = ["setpriv", f"--reuid={account.pw_uid}", f"--regid={account.pw_gid}", "--init-groups",
                "env", "-i", "PATH=/usr/bin:/bin", f"HOME={self.base / 'attacker-home'}",
                "sh", "-c", 'umask 007; exec "$@"', "attacker", *args]
        return subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=cwd or self.shared)

    def snapshot(self) -> dict[str, tuple[object, ...]]:
        return snapshot(self.canary)


def make_scene(shared_name: str = "project") -> Scene:
    """A fresh scene under /var/tmp (pytest's own temporary directories are root's alone, 0700)."""
    group = project_group()
    base = Path(tempfile.mkdtemp(prefix="envbuild-hostile-", dir="/var/tmp"))
    base.chmod(0o711)
    home = base / "home"
    home.mkdir(mode=0o700)
    canary = home / "canary"
    for name, text in CANARY_FILES.items():
        path = canary / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    bin_dir = home / "bin"
    bin_dir.mkdir()
    for name, text in (("sbatch", FAKE_SBATCH), ("apptainer", FAKE_APPTAINER)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    account = victim()
    for path in [home, *home.rglob("*")]:
        os.lchown(path, account.pw_uid, account.pw_gid)
    (canary / ".ssh").chmod(0o700)
    (canary / ".ssh/id_rsa").chmod(0o600)
    attacker_home = base / "attacker-home"
    attacker_home.mkdir(mode=0o700)
    give(attacker_home, attacker())
    shared = base / shared_name
    shared.mkdir()
    give(shared, account, gid=group.gr_gid, mode=0o2770)
    return Scene(base=base, home=home, canary=canary, bin=bin_dir, shared=shared, gid=group.gr_gid)


def remove_scene(scene: Scene) -> None:
    """As root; shutil.rmtree removes a planted link, never what it points to."""
    shutil.rmtree(scene.base, ignore_errors=True)


def scene_fixture() -> Iterator[Scene]:
    scene = make_scene()
    try:
        yield scene
    finally:
        remove_scene(scene)


# --- planting ------------------------------------------------------------------------------------------------

def plant_link(path: Path, target: Path, gid: int) -> Path:
    """The attacker's symbolic link at `path` (whatever was there goes first), pointing at `target`."""
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)
    path.symlink_to(target)
    os.lchown(path, attacker().pw_uid, gid)
    return path


def plant_dir(scene: Scene, relative: str) -> Path:
    """The attacker's directories at `relative` under the group directory (each missing component)."""
    return scene.mkdir_shared(relative, owner=attacker())


def group_dir_with_strangers_link(base: Path, name: str, *, victims: str = "Documents") -> tuple[Path, Path]:
    """(the victim's directory, the group project) for a test run by the victim itself (root, as CI runs the
    tests): `base/project`, 2770 as a group project is, holding at `name` the attacker's (the stranger's)
    symbolic link to the victim's empty directory `base/<victims>`. Skips unless root, who alone can plant a
    link that is another user's."""
    if os.geteuid() != 0:
        pytest.skip("needs root to plant another user's link")
    victims_dir = base / victims
    victims_dir.mkdir()
    project = base / "project"
    project.mkdir()
    project.chmod(0o2770)
    (project / name).symlink_to(victims_dir)
    os.lchown(project / name, attacker().pw_uid, attacker().pw_gid)
    return victims_dir, project


# --- reading what a traced run did -------------------------------------------------------------------------

_TOKEN = re.compile(r'(?:-?\d+|AT_FDCWD)<((?:[^>\\]|\\.)*)>|"((?:[^"\\]|\\.)*)"')
_LINE = re.compile(r"^(\d+)\s+([a-z0-9_]+)\((.*)\)\s+=\s+(.*)$")


def _unescape(text: str) -> str:
    return text.encode("latin-1", "backslashreplace").decode("unicode_escape").encode("latin-1").decode(
        "utf-8", "replace")


@dataclass(frozen=True)
class Effect:
    """One name a traced run created, removed (renamed away included), or wrote or changed in place."""

    what: str  # created | removed | written
    path: str
    syscall: str
    directory: bool = False  # made or removed as a directory (mkdir, rmdir, unlinkat AT_REMOVEDIR)


def _joined_lines(text: str) -> Iterator[str]:
    """strace -f lines with each `<unfinished ...>` call joined to its `<... resumed>` end."""
    pending: dict[str, str] = {}
    for line in text.splitlines():
        head, _, rest = line.partition(" ")
        if line.endswith("<unfinished ...>"):
            pending[head] = line[: -len("<unfinished ...>")].rstrip()
            continue
        resumed = re.match(r"^<\.\.\. [a-z0-9_]+ resumed>(.*)$", rest.strip())
        if resumed and head in pending:
            yield pending.pop(head) + resumed.group(1)
            continue
        yield line


def trace_effects(trace: Path) -> list[Effect]:
    """Every successful effect in strace's output at `trace` (files named trace, trace.PID...)."""
    effects: list[Effect] = []
    cwd: dict[str, str] = {}  # a process's working directory, as the last AT_FDCWD<...> it used shows it
    for line in _joined_lines(trace.read_text(errors="replace")):
        match = _LINE.match(line)
        if not match:
            continue
        pid, call, args, result = match.groups()
        seen_cwd = re.search(r"AT_FDCWD<((?:[^>\\]|\\.)*)>", args)
        if seen_cwd:
            cwd[pid] = _unescape(seen_cwd.group(1))
        if result.startswith(("-1", "?")):
            continue
        # dir-fd paths (from -y) and strings, in order; a path string after a dir-fd is relative to it
        tokens = [(fd_path, string) for fd_path, string in _TOKEN.findall(args)]
        names: list[str] = []
        directory = ""
        for fd_path, string in tokens:
            if fd_path:
                if directory:  # fchmod(fd<path>) and the like: the descriptor itself is the name
                    names.append(_unescape(directory))
                directory = fd_path
            else:
                value = _unescape(string)
                relative_to = _unescape(directory) if directory else cwd.get(pid, "")
                names.append(os.path.join(relative_to, value) if relative_to else value)
                directory = ""
        if directory:
            names.append(_unescape(directory))
        names = [os.path.normpath(n) for n in names]
        if call in ("open", "openat", "openat2", "creat"):
            if call == "creat" or any(flag in args for flag in _WRITE_FLAGS):
                path = names[0] if call != "openat" or len(names) == 1 else names[1]
                effects.append(Effect("created" if "O_CREAT" in args or call == "creat" else "written", path, call))
        elif call in ("mkdir", "mkdirat"):
            effects.append(Effect("created", names[-1], call, directory=True))
        elif call in ("rename", "renameat", "renameat2"):
            source, target = names[-2], names[-1]
            effects += [Effect("removed", source, call), Effect("created", target, call)]
        elif call in ("unlink", "unlinkat", "rmdir"):
            effects.append(Effect("removed", names[-1], call, directory=call == "rmdir" or "AT_REMOVEDIR" in args))
        elif call in ("symlink", "symlinkat", "link", "linkat"):
            effects.append(Effect("created", names[-1], call))
        elif call in ("chmod", "fchmod", "fchmodat", "chown", "fchown", "fchownat", "lchown", "truncate"):
            effects.append(Effect("written", names[0], call))
    return effects


def effects_below(effects: list[Effect], root: Path) -> list[Effect]:
    """The effects on names strictly below `root` (a directory the attacker may write)."""
    real = os.path.realpath(root)
    return [e for e in effects if e.path.startswith(real + "/")]
