"""Installing the Python packages of a spec into the sandbox's venv: package sources as the host's pip
sees them (indexes, find-links, certificates), the PyTorch index, and the pip or uv command."""

from __future__ import annotations

import posixpath
import shlex
from dataclasses import dataclass, replace

from envbuild.builder.plan.actions import Action, MakeDirs, Remove, Touch, WriteFile
from envbuild.builder.plan.plandata import BuildRequest
from envbuild.builder.plan.pythontarget import BASE_PYTHON_VAR, installs_into_base, locate_base_python, target_python_words
from envbuild.builder.plan.record import BASE_PACKAGES, FREEZE_TO_FILE_SCRIPT
from envbuild.builder.plan.sandbox import HOST_MOUNT, Bind, sandbox_exec
from envbuild.envspec.specmodel import VENV_PREFIX
from envbuild.host.pip import local_path_of
from envbuild.host.secrets import has_credentials
from envbuild.shared.overlayformat import BASE_PTH
from envbuild.store.layout import StorePaths

# Run by a new venv's Python: the base environment's site directories its sys.path lacks go into a .pth file
# (envbuild.shared.overlayformat.BASE_PTH). A venv made from a venv's Python (LAIF's /opt/venv, envbuild's own)
# inherits only the underlying interpreter's site directory; the .pth adds the base venv's, after the new
# venv's own (its packages win). Arguments: the directories, or @FILE for a file listing them one a line.
BASE_PTH_SCRIPT = (
    "import os, sys, sysconfig\n"
    "dirs = [d for a in sys.argv[1:] for d in (open(a[1:]).read().split() if a.startswith('@') else [a])]\n"
    "missing = [d for d in dirs if d not in sys.path]\n"
    "with open(os.path.join(sysconfig.get_paths()['purelib'], " + repr(BASE_PTH) + "), 'w') as handle:\n"
    "    handle.write(''.join(d + chr(10) for d in missing))\n"
)


# Where the base's own Python lists the directories it imports from (its sys.path, as its users get it: the
# base's environment, PYTHONPATH included), once the packages are installed into it, for the torch family check
# (CheckTorchFamily.sys_path_file); in the sandbox's host mount, never in the image.
BASE_SYS_PATH = f"{HOST_MOUNT}/base-sys-path.txt"
SYS_PATH_SCRIPT = ("import os, sys; open(sys.argv[1], 'w').write(''.join(p + chr(10) for p in sys.path "
                   "if p.startswith('/') and os.path.isdir(p)))")


def venv_actions(request: BuildRequest, sandbox: str) -> list[Action]:
    """The venv of python.target made in the sandbox (none for a base target) and, with a lock, the target Python's
    version checked against the lock's."""
    python = request.spec.python
    interpreter = shlex.quote(python.interpreter)
    # A base whose python3 is itself a venv's (the LUMI AI Factory images' /opt/venv): a venv made from it
    # would not see that venv's packages (its torch built for the image's ROCm), so it is made with
    # --system-site-packages and a .pth naming the base venv's site directories, as for overlays.
    # python.target: venv-over-base asks for that whatever the base's Python is.
    site_dirs = "import sys; print(chr(10).join(p for p in sys.path if p.endswith(('site-packages', 'dist-packages'))))"

    def over_base(py: str) -> str:
        return (f"{py} -m venv --system-site-packages {VENV_PREFIX} && "
                f"{py} -c \"{site_dirs}\" > /tmp/envbuild-base-site-dirs.txt && "
                f"{VENV_PREFIX}/bin/python -c {shlex.quote(BASE_PTH_SCRIPT)} @/tmp/envbuild-base-site-dirs.txt && "
                f"rm -f /tmp/envbuild-base-site-dirs.txt")

    # A base built by envbuild (or a parent env layer) already has the venv: install into it instead
    # of re-creating it (its `python3` would be the venv's own interpreter).
    reuse = f"if [ -x {VENV_PREFIX}/bin/python ]; then echo 'reusing the venv {VENV_PREFIX}'; "
    if installs_into_base(python):
        script = (f"{locate_base_python(python)}\necho \"installing with the Python of the base: ${BASE_PYTHON_VAR}\"\n"
                  f"[ -f {BASE_PACKAGES} ] || {{ mkdir -p {posixpath.dirname(BASE_PACKAGES)} && "
                  f"\"${BASE_PYTHON_VAR}\" -I -c {shlex.quote(FREEZE_TO_FILE_SCRIPT)} {BASE_PACKAGES}; }}")
    elif python.target == "venv-over-base":
        base_python = f'"${BASE_PYTHON_VAR}"'
        script = (f"{reuse}else {locate_base_python(python)}; echo \"a venv over the Python of the base ${BASE_PYTHON_VAR}\"; "
                  f"{over_base(base_python)}; fi")
    else:
        script = (f"{reuse}"
                  f"elif {interpreter} -c 'import sys; sys.exit(sys.prefix == sys.base_prefix)'; then "
                  f"echo 'the base Python is a venv: inheriting its packages'; {over_base(interpreter)}; "
                  f"else {interpreter} -m venv {VENV_PREFIX}; fi")
    if request.lock.python:
        # A lock pins wheels for one Python (cp311...): refuse a base whose Python differs before
        # the installer fails on some wheel with a less helpful message. In the same container start
        # (each start is on the +1 build's path to its tests).
        check = (f"import sys; v = '%d.%d' % sys.version_info[:2]; "
                 f"sys.exit(0 if v == {request.lock.python!r} else 'the lock was made for Python {request.lock.python}, "
                 f"but the base has Python ' + v + ': run envbuild lock again')")
        script += f"\n{target_python_words(python)} -I -c {shlex.quote(check)}"
    return [sandbox_exec(request, sandbox, ["/bin/sh", "-ec", script], writable=True)]


# --index-url, --extra-index-url, --find-links as each installer's variable and its list separator.
_CREDENTIAL_VARIABLES = {
    "uv": (("UV_INDEX_URL", " "), ("UV_EXTRA_INDEX_URL", " "), ("UV_FIND_LINKS", ",")),
    "pip": (("PIP_INDEX_URL", " "), ("PIP_EXTRA_INDEX_URL", " "), ("PIP_FIND_LINKS", " ")),
}


@dataclass(frozen=True)
class PackageSources:
    """The host's package sources translated for use inside the sandbox: local directories are bound
    under HOST_MOUNT and the locations rewritten to point there."""

    index_url: str | None
    extra_index_urls: tuple[str, ...]
    find_links: tuple[str, ...]
    trusted_hosts: tuple[str, ...]
    no_index: bool
    cert: str | None
    client_cert: str | None
    binds: tuple[Bind, ...]
    shown: tuple[str, ...]

    @classmethod
    def on_host(cls, request: BuildRequest) -> PackageSources:
        """The sources as the host's pip sees them, for resolving on the host (envbuild lock)."""
        pip = request.facts.pip
        torch_index = request.spec.python.pytorch_index_url(request.recipe)
        # The variant's PyTorch index goes first among the extra indexes: uv gives earlier indexes priority
        # (with unsafe-best-match too, a version found on several indexes comes from the first), so the torch
        # family comes from torch's index where that index has it. The spec pins torchvision/torchaudio to
        # torch's release (envbuild.envspec.torchfamily), and that index's labelled build (0.28.0+cpu) sorts
        # above PyPI's 0.28.0 for `==0.28.0`; the check after installing catches a family it lacks.
        extras = ((torch_index,) if torch_index else ()) + pip.extra_index_urls
        return cls(
            index_url=pip.index_url, extra_index_urls=extras, find_links=pip.find_links,
            trusted_hosts=pip.trusted_hosts, no_index=pip.no_index, cert=pip.cert, client_cert=pip.client_cert,
            binds=(), shown=tuple(x for x in (pip.index_url, *extras, *pip.find_links) if x),
        )

    @classmethod
    def from_request(cls, request: BuildRequest) -> PackageSources:
        """The host's sources as seen from inside the sandbox."""
        host = cls.on_host(request)
        binds: list[Bind] = []
        counter = iter(range(1000))

        def inside(location: str, *, is_index: bool = False) -> str:
            local = local_path_of(location)
            if local is None:
                return location
            mount = f"{HOST_MOUNT}/src{next(counter)}"
            if is_index:
                # A local "simple" index links its files relatively (../../files/x.whl,
                # ../../packages/...): bind the index's parent so those links resolve inside.
                local = local.rstrip("/") or "/"
                parent, leaf = local.rsplit("/", 1) if "/" in local.lstrip("/") else ("/", local.lstrip("/"))
                binds.append(Bind(parent or "/", mount))
                return f"file://{mount}/{leaf}"
            binds.append(Bind(local, mount))
            return ("file://" + mount) if location.startswith("file://") else mount

        cert = client_cert = None
        if host.cert:
            cert = f"{HOST_MOUNT}/ca-bundle.pem"
            binds.append(Bind(host.cert, cert, is_file=True))
        if host.client_cert:
            client_cert = f"{HOST_MOUNT}/client-cert.pem"
            binds.append(Bind(host.client_cert, client_cert, is_file=True))
        # binds= comes last: the inside() calls before it add to the list.
        return replace(
            host,
            index_url=inside(host.index_url, is_index=True) if host.index_url else None,
            extra_index_urls=tuple(inside(x, is_index=True) for x in host.extra_index_urls),
            find_links=tuple(inside(x) for x in host.find_links),
            cert=cert, client_cert=client_cert, binds=tuple(binds),
        )

    def _locations(self) -> tuple[tuple[str, tuple[str, ...]], ...]:
        """(flag, locations) of each kind of source, in the order the installers are given them."""
        return (("--index-url", (self.index_url,) if self.index_url else ()),
                ("--extra-index-url", self.extra_index_urls), ("--find-links", self.find_links))

    def _index_args(self, trusted_host_flag: str) -> list[str]:
        """Flags both installers spell alike, plus the one they name differently. A kind of source with
        credentials in a location goes by credential_env() instead."""
        args: list[str] = ["--no-index"] if self.no_index else []
        for flag, locations in self._locations():
            if not any(map(has_credentials, locations)):
                for location in locations:
                    args += [flag, location]
        for host in self.trusted_hosts:
            args += [trusted_host_flag, host]
        return args

    def credential_env(self, installer: str) -> list[tuple[str, str]]:
        """The kinds of source whose locations carry credentials (https://user:token@host/simple), as the
        installer's own variables instead of flags: a command line is visible to every user of the machine
        (ps), a process's environment only to its owner. They are never written anywhere: plans, logs and
        layer keys show them redacted."""
        variables = _CREDENTIAL_VARIABLES[installer]
        env = []
        for (_flag, locations), (variable, separator) in zip(self._locations(), variables, strict=True):
            if any(map(has_credentials, locations)):
                env.append((variable, separator.join(locations)))
        return env

    def pip_args(self) -> list[str]:
        args = self._index_args("--trusted-host")
        if self.cert:
            args += ["--cert", self.cert]
        if self.client_cert:
            args += ["--client-cert", self.client_cert]
        return args

    def uv_args(self) -> list[str]:
        # uv takes certificates from SSL_CERT_FILE / SSL_CLIENT_CERT (set by the install step).
        # The host's configuration was written for pip, which takes the best version from all
        # indexes; uv's default (first index that has the package) would silently differ.
        return [*self._index_args("--allow-insecure-host"), "--index-strategy", "unsafe-best-match"]


def install_actions(request: BuildRequest, sandbox: str, installer: str, requirements: tuple[str, ...],
                     sources: PackageSources, then: tuple[str, ...] = ()) -> list[Action]:
    """Install into the sandbox's venv; `then`, a command run in the same container once the installer
    succeeded (the package list: one container start less on a +1 build's path to its tests)."""
    facts = request.facts
    binds = list(sources.binds)
    env: list[tuple[str, str]] = sources.credential_env(installer)
    actions: list[Action] = []
    if request.lock.requirements is not None:
        # Exactly the lock: every pinned file checked against its hash, no resolution, no extras.
        lock_inside = f"{HOST_MOUNT}/lock/requirements.txt"
        actions += [MakeDirs((f"{sandbox}{HOST_MOUNT}/lock",), root=sandbox),
                    WriteFile(f"{sandbox}{lock_inside}", request.lock.requirements, root=sandbox)]
        targets = ["--require-hashes", "--no-deps", "-r", lock_inside]
    else:
        targets = list(requirements)
    host_cache = StorePaths(str(facts.cache_dir)).download_cache(installer)
    cache_bind = Bind(host_cache, f"{HOST_MOUNT}/cache", read_only=False)
    if installer == "uv":
        assert facts.uv is not None
        uv_inside = f"{HOST_MOUNT}/uv"
        binds += [Bind(facts.uv, uv_inside, is_file=True), cache_bind]
        argv = [uv_inside, "pip", "install", "--python", f"{VENV_PREFIX}/bin/python",
                # Compile now: in a read-only image Python would recompile on every start.
                "--compile-bytecode", "--link-mode=copy", "--cache-dir", f"{HOST_MOUNT}/cache",
                *sources.uv_args(), *targets]
        if sources.cert:
            env.append(("SSL_CERT_FILE", sources.cert))
        if sources.client_cert:
            env.append(("SSL_CLIENT_CERT", sources.client_cert))
    else:
        binds.append(cache_bind)
        argv = [f"{VENV_PREFIX}/bin/python", "-m", "pip", "install", "--no-input", "--disable-pip-version-check",
                "--cache-dir", f"{HOST_MOUNT}/cache", *sources.pip_args(), *targets]
    mount_dirs = tuple(f"{sandbox}{b.inside}" for b in binds if not b.is_file)
    mount_files = tuple(f"{sandbox}{b.inside}" for b in binds if b.is_file)
    actions.append(MakeDirs((host_cache,)))
    actions.append(MakeDirs(mount_dirs, root=sandbox))
    if mount_files:
        actions.append(Touch(mount_files, root=sandbox))
    python = request.spec.python
    if installs_into_base(python):
        # The base's Python, found in the sandbox; its pip may be one that refuses a distribution's own Python
        # (PEP 668) unless told, which older pips do not know as an option but ignore as a variable.
        env.append(("PIP_BREAK_SYSTEM_PACKAGES", "1"))
        no_pip = ("fix: use a base whose Python has pip (`python3 -m ensurepip` where the base is made), or write "
                  "python.target: venv-over-base (its venv brings its own pip)")
        lines = [locate_base_python(python),
                 f'"${BASE_PYTHON_VAR}" -c "import pip" 2>/dev/null || {{ echo "envbuild: the Python of the base '
                 f'${BASE_PYTHON_VAR} has no pip to install with" >&2; echo {shlex.quote(no_pip)} >&2; exit 3; }}',
                 *(f'"${BASE_PYTHON_VAR}" {shlex.join(command[1:])}' for command in (argv, then) if command),
                 f'"${BASE_PYTHON_VAR}" -c {shlex.quote(SYS_PATH_SCRIPT)} {BASE_SYS_PATH}']
        argv = ["/bin/sh", "-ec", "\n".join(lines)]
    elif then:
        argv = ["/bin/sh", "-ec", f"{shlex.join(argv)}\n{shlex.join(then)}"]
    actions.append(sandbox_exec(request, sandbox, argv, writable=True, binds=binds, env=env))
    if installer == "uv":
        # uv's lock file for the venv, world-writable by design (for shared caches); no part of the environment.
        actions.append(Remove((f"{sandbox}{VENV_PREFIX}/.lock",), root=sandbox))
    return actions


def host_index_args(request: BuildRequest) -> list[str]:
    """uv's index flags for resolving on the host (envbuild lock): the host's sources as they are,
    the variant's PyTorch index first among the extra indexes. Sources with credentials: host_index_env."""
    return PackageSources.on_host(request).uv_args()


def host_index_env(request: BuildRequest) -> list[tuple[str, str]]:
    """The host's sources that carry credentials, as uv's variables (see PackageSources.credential_env)."""
    return PackageSources.on_host(request).credential_env("uv")
