"""Pure build planner: (validated spec, recipe, host facts) -> the exact steps of a build.

The method is cotainr's, which needs neither fakeroot nor definition-file %post (neither works on
LUMI or on kernels without CAP_SYS_RESOURCE): base root filesystem -> writable sandbox directory ->
`apptainer exec --writable` to install -> `apptainer build image.sif sandbox/`.
Nothing here touches the filesystem or runs a program; `envbuild.buildexec` does that.
"""

from __future__ import annotations

import hashlib
import json
import shlex
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import TYPE_CHECKING

from envbuild.actions import (
    Action,
    CopyFile,
    CopyTree,
    MakeDirs,
    MergeJson,
    Remove,
    Rename,
    Run,
    Step,
    Touch,
    WriteFile,
    WriteRunWrappers,
)
from envbuild.hostfacts import HostFacts
from envbuild.hostpip import local_path_of
from envbuild.spec import VENV_PREFIX, BaseImage, Spec

if TYPE_CHECKING:
    from envbuild.recipeschema import Recipe

# Build-time mount points inside the sandbox (host pip sources, caches, tools); removed before squashing.
HOST_MOUNT = "/.envbuild-host"
# Where the image records how it was made.
RECORD_DIR = "/.envbuild"
ENV_SCRIPT = "/.singularity.d/env/90-envbuild.sh"
# Apptainer's and SingularityCE's default PATH inside a container.
DEFAULT_CONTAINER_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
LABELS_FILE = "/.singularity.d/labels.json"
# Always in a debootstrap base: a Python that can make venvs, and CA certificates for HTTPS.
DEBOOTSTRAP_ALWAYS = ("python3", "python3-venv", "ca-certificates")
# Bump when the layout of cached bases changes, so old cache entries are not reused.
BASE_LAYOUT_VERSION = 2


@dataclass(frozen=True)
class BuildRequest:
    """What the user asked for, plus everything the planner needs from outside, as data."""

    spec: Spec
    spec_text: str
    spec_sha256: str
    spec_dir: str  # absolute directory of the spec file, for files[].src
    recipe: Recipe
    facts: HostFacts
    output: str  # absolute path of the .sif to produce
    build_id: str  # unique per build (names the work dir and the partial image)
    base_path: str | None = None  # localimage: absolute host path of the .sif or sandbox dir
    base_fingerprint: str = ""  # localimage .sif: size and mtime, so a changed file is not served from cache
    as_root: bool = True
    keep_work: bool = False


@dataclass(frozen=True)
class BuildPlan:
    name: str
    output: str
    work_dir: str
    sandbox: str
    installer: str
    requirements: tuple[str, ...]
    package_sources: tuple[str, ...]  # index URLs and find-links as given on the host (credentials redacted when shown)
    steps: tuple[Step, ...]


def plan_build(request: BuildRequest) -> BuildPlan:
    spec, facts = request.spec, request.facts
    work = f"{facts.cache_dir}/work/{spec.name}-{request.build_id}"
    sandbox = f"{work}/sandbox"
    installer = _choose_installer(spec, facts)
    requirements = tuple(spec.python.requirements())
    sources = _PackageSources.from_request(request)

    steps: list[Step] = []
    steps += _base_steps(request, work, sandbox)
    steps.append(_venv_step(request, sandbox))
    if requirements:
        steps.append(_install_step(request, sandbox, installer, requirements, sources))
    steps.append(_configure_step(request, sandbox, installer))
    if spec.post:
        steps.append(
            Step("post", f"run {len(spec.post)} post command(s)",
                 tuple(_exec(request, sandbox, ["/bin/sh", "-ec", cmd], writable=True) for cmd in spec.post))
        )
    steps.append(
        Step("record", "record installed packages",
             (_exec(request, sandbox, ["/bin/sh", "-ec", f"{VENV_PREFIX}/bin/python -m pip freeze --all > {RECORD_DIR}/pip-freeze.txt"],
                    writable=True),
              Remove((f"{sandbox}{HOST_MOUNT}",))))
    )
    if spec.tests:
        steps.append(
            Step("test", f"run {len(spec.tests)} test(s) inside the image",
                 tuple(_exec(request, sandbox, ["/bin/sh", "-ec", cmd], writable=False) for cmd in spec.tests))
        )
    partial = f"{request.output}.partial-{request.build_id}"
    steps.append(
        Step("squash", f"write {PurePosixPath(request.output).name}",
             (Run((facts.runtime.path, "build", "--force", partial, sandbox)), Rename(partial, request.output)),
             cleanup=(Remove((partial,)),))
    )
    out_dir = str(PurePosixPath(request.output).parent)
    steps.append(
        Step("wrappers", f"write run wrappers to {out_dir}/bin",
             (WriteRunWrappers(f"{sandbox}{VENV_PREFIX}/bin", f"{out_dir}/bin", request.output, spec.system,
                               facts.runtime.name),))
    )
    if not request.keep_work:
        steps.append(Step("clean", "remove the build sandbox", (Remove((work,)),)))
    return BuildPlan(
        name=spec.name, output=request.output, work_dir=work, sandbox=sandbox, installer=installer,
        requirements=requirements, package_sources=sources.shown, steps=tuple(steps),
    )


def _choose_installer(spec: Spec, facts: HostFacts) -> str:
    if spec.python.installer == "auto":
        return "uv" if facts.uv else "pip"
    return spec.python.installer


# --- base -----------------------------------------------------------------------------------------


def base_cache_key(base: BaseImage, facts: HostFacts, fingerprint: str = "") -> str:
    """Cache entry name for a base root filesystem: readable prefix + hash of everything that shapes it."""
    identity = {
        "layout": BASE_LAYOUT_VERSION, "kind": base.kind, "ref": base.ref,
        "include": sorted(set(base.include)), "mirror": base.mirror or facts.debian_mirror or "",
        "fingerprint": fingerprint,
    }
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]
    # Last path component keeps the name readable: debootstrap-bookworm-..., docker-python_3.12-slim-...
    readable = base.ref.split("://", 1)[-1].rstrip("/").rsplit("/", 1)[-1].replace(":", "_")[:48]
    return f"{base.kind}-{readable}-{digest}"


def _base_steps(request: BuildRequest, work: str, sandbox: str) -> list[Step]:
    spec, facts = request.spec, request.facts
    base = spec.base
    prepare = (Remove((work,)), MakeDirs((work,)))
    if base.kind == "localimage" and request.base_path and not request.base_path.endswith((".sif", ".simg", ".img")):
        # A sandbox directory: not cached (it can change under us); unpacked like any other source.
        argv = (*_sandbox_build(request), sandbox, request.base_path)
        return [Step("sandbox", f"copy base sandbox {request.base_path}", (*prepare, Run(argv)))]

    entry = f"{facts.cache_dir}/bases/{base_cache_key(base, facts, request.base_fingerprint)}"
    partial, rootfs, marker = f"{entry}/rootfs.partial", f"{entry}/rootfs", f"{entry}/complete"
    if base.kind == "debootstrap":
        include = ",".join(dict.fromkeys((*DEBOOTSTRAP_ALWAYS, *base.include)))
        tree = f"{entry}/debootstrap.partial"
        argv = ["debootstrap", "--variant=minbase", f"--include={include}", base.ref, tree]
        mirror = base.mirror or facts.debian_mirror
        if mirror:
            argv.append(mirror)
        fetch: tuple[Action, ...] = (
            Remove((tree,)),
            Run(tuple(argv)),
            # The downloaded .debs are not part of the environment.
            Run(("find", f"{tree}/var/cache/apt/archives", "-name", "*.deb", "-delete")),
            # debootstrap writes no /etc/hosts; without one the runtime cannot bind the host's, and
            # `localhost` (torchrun --standalone's rendezvous) does not resolve inside the container.
            WriteFile(f"{tree}/etc/hosts", "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"),
            # Through the runtime once, so the tree gets the runtime's /.singularity.d skeleton (its
            # env scripts set the default PATH); the runtime adds it only where none exists.
            Run((*_sandbox_build(request), partial, tree)),
            Remove((tree,)),
        )
        cleanup: tuple[Action, ...] = (Remove((partial, tree)),)
        title = f"debootstrap {base.ref} (cached after the first build)"
    else:
        source = request.base_path if base.kind == "localimage" else base.ref
        fetch = (Run((*_sandbox_build(request), partial, str(source))),)
        cleanup = (Remove((partial,)),)
        title = f"unpack base {base.describe()} (cached after the first build)"
    ensure = Step(
        "base", title,
        (Remove((partial,)), MakeDirs((entry,)), *fetch, Rename(partial, rootfs), WriteFile(marker, base.describe() + "\n")),
        skip_if_exists=marker, cleanup=cleanup,
    )
    copy = Step("sandbox", "copy the base into a fresh sandbox", (*prepare, CopyTree(rootfs, sandbox)))
    return [ensure, copy]


def _sandbox_build(request: BuildRequest) -> tuple[str, ...]:
    argv = [request.facts.runtime.path, "build", "--force", "--sandbox"]
    if not request.as_root:
        argv.append("--fix-perms")  # an unprivileged user must own every file to write into the sandbox
    return tuple(argv)


# --- python ---------------------------------------------------------------------------------------


def _venv_step(request: BuildRequest, sandbox: str) -> Step:
    interpreter = shlex.quote(request.spec.python.interpreter)
    # A base built by envbuild already has the venv: install into it instead of re-creating it
    # (its `python3` would be the venv's own interpreter).
    script = (f"if [ -x {VENV_PREFIX}/bin/python ]; then echo 'reusing the base image venv {VENV_PREFIX}'; "
              f"else {interpreter} -m venv {VENV_PREFIX}; fi")
    return Step(
        "venv", f"create the venv at {VENV_PREFIX}",
        (_exec(request, sandbox, ["/bin/sh", "-ec", script], writable=True),),
    )


@dataclass(frozen=True)
class _Bind:
    host: str
    inside: str  # absolute path inside the sandbox
    is_file: bool = False
    read_only: bool = True

    def flag(self) -> str:
        return f"{self.host}:{self.inside}" + (":ro" if self.read_only else "")


@dataclass(frozen=True)
class _PackageSources:
    """The host's package sources translated for use inside the sandbox: local directories are bound
    under HOST_MOUNT and the locations rewritten to point there."""

    index_url: str | None
    extra_index_urls: tuple[str, ...]
    find_links: tuple[str, ...]
    trusted_hosts: tuple[str, ...]
    no_index: bool
    cert: str | None
    client_cert: str | None
    binds: tuple[_Bind, ...]
    shown: tuple[str, ...]

    @classmethod
    def from_request(cls, request: BuildRequest) -> _PackageSources:
        pip = request.facts.pip
        binds: list[_Bind] = []
        counter = iter(range(1000))

        def inside(location: str, *, is_index: bool = False) -> str:
            host = local_path_of(location)
            if host is None:
                return location
            mount = f"{HOST_MOUNT}/src{next(counter)}"
            if is_index:
                # A local "simple" index links its files relatively (../../files/x.whl,
                # ../../packages/...): bind the index's parent so those links resolve inside.
                host = host.rstrip("/") or "/"
                parent, leaf = host.rsplit("/", 1) if "/" in host.lstrip("/") else ("/", host.lstrip("/"))
                binds.append(_Bind(parent or "/", mount))
                return f"file://{mount}/{leaf}"
            binds.append(_Bind(host, mount))
            return ("file://" + mount) if location.startswith("file://") else mount

        torch_index = _torch_index(request)
        # The variant's PyTorch index goes first among the extra indexes: uv gives earlier indexes priority.
        extras = ((torch_index,) if torch_index else ()) + pip.extra_index_urls
        shown = tuple(x for x in (pip.index_url, *extras, *pip.find_links) if x)
        cert = client_cert = None
        if pip.cert:
            cert = f"{HOST_MOUNT}/ca-bundle.pem"
            binds.append(_Bind(pip.cert, cert, is_file=True))
        if pip.client_cert:
            client_cert = f"{HOST_MOUNT}/client-cert.pem"
            binds.append(_Bind(pip.client_cert, client_cert, is_file=True))
        return cls(
            index_url=inside(pip.index_url, is_index=True) if pip.index_url else None,
            extra_index_urls=tuple(inside(x, is_index=True) for x in extras),
            find_links=tuple(inside(x) for x in pip.find_links),
            trusted_hosts=pip.trusted_hosts, no_index=pip.no_index, cert=cert, client_cert=client_cert,
            binds=tuple(binds), shown=shown,
        )

    def _index_args(self, trusted_host_flag: str) -> list[str]:
        """Flags both installers spell alike, plus the one they name differently."""
        args: list[str] = ["--no-index"] if self.no_index else []
        if self.index_url:
            args += ["--index-url", self.index_url]
        for url in self.extra_index_urls:
            args += ["--extra-index-url", url]
        for link in self.find_links:
            args += ["--find-links", link]
        for host in self.trusted_hosts:
            args += [trusted_host_flag, host]
        return args

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


def _torch_index(request: BuildRequest) -> str | None:
    pytorch = request.spec.python.pytorch
    if pytorch is None:
        return None
    if pytorch.index_url:
        return pytorch.index_url
    return request.recipe.pytorch_index_for(pytorch.wheel_tag)


def _install_step(request: BuildRequest, sandbox: str, installer: str, requirements: tuple[str, ...],
                  sources: _PackageSources) -> Step:
    facts = request.facts
    binds = list(sources.binds)
    env: list[tuple[str, str]] = []
    if installer == "uv":
        assert facts.uv is not None
        uv_inside = f"{HOST_MOUNT}/uv"
        binds.append(_Bind(facts.uv, uv_inside, is_file=True))
        binds.append(_Bind(f"{facts.cache_dir}/uv", f"{HOST_MOUNT}/cache", read_only=False))
        argv = [uv_inside, "pip", "install", "--python", f"{VENV_PREFIX}/bin/python",
                # Compile now: in a read-only image Python would recompile on every start.
                "--compile-bytecode", "--link-mode=copy", "--cache-dir", f"{HOST_MOUNT}/cache",
                *sources.uv_args(), *requirements]
        if sources.cert:
            env.append(("SSL_CERT_FILE", sources.cert))
        if sources.client_cert:
            env.append(("SSL_CLIENT_CERT", sources.client_cert))
        host_cache = f"{facts.cache_dir}/uv"
    else:
        binds.append(_Bind(f"{facts.cache_dir}/pip", f"{HOST_MOUNT}/cache", read_only=False))
        argv = [f"{VENV_PREFIX}/bin/python", "-m", "pip", "install", "--no-input", "--disable-pip-version-check",
                "--cache-dir", f"{HOST_MOUNT}/cache", *sources.pip_args(), *requirements]
        host_cache = f"{facts.cache_dir}/pip"
    mount_dirs = tuple(f"{sandbox}{b.inside}" for b in binds if not b.is_file)
    mount_files = tuple(f"{sandbox}{b.inside}" for b in binds if b.is_file)
    actions: list[Action] = [MakeDirs((host_cache, *mount_dirs))]
    if mount_files:
        actions.append(Touch(mount_files))
    actions.append(_exec(request, sandbox, argv, writable=True, binds=binds, env=env))
    return Step("install", f"install {len(requirements)} requirement(s) with {installer}", tuple(actions))


# --- image configuration --------------------------------------------------------------------------


def env_script(spec: Spec, version: str, spec_sha256: str) -> str:
    """The script the runtime sources at every container start: activates the venv, sets spec env."""
    lines = [
        f"# Written by envbuild {version} for {spec.name} (spec sha256 {spec_sha256[:16]}).",
        "# Sourced by apptainer/singularity at container start. Values are literal (no $ expansion).",
        f"export VIRTUAL_ENV={shlex.quote(VENV_PREFIX)}",
        # The runtime starts these scripts with an empty PATH and fills in its default only if they
        # leave it empty, so the default must be spelled out here.
        f"PATH=${{PATH:-{DEFAULT_CONTAINER_PATH}}}",
        f'case ":$PATH:" in *":{VENV_PREFIX}/bin:"*) ;; *) PATH="{VENV_PREFIX}/bin:$PATH" ;; esac',
        "export PATH",
    ]
    lines += [f"export {key}={shlex.quote(value)}" for key, value in spec.env.items()]
    return "\n".join(lines) + "\n"


def image_labels(request: BuildRequest, installer: str) -> dict[str, str]:
    spec = request.spec
    labels = {
        "org.envbuild.version": request.facts.envbuild_version,
        "org.envbuild.spec-name": spec.name,
        "org.envbuild.spec-sha256": request.spec_sha256,
        "org.envbuild.system": spec.system,
        "org.envbuild.base": spec.base.describe(),
        "org.envbuild.installer": installer,
        "org.envbuild.venv": VENV_PREFIX,
    }
    labels.update(spec.labels)
    return labels


def _configure_step(request: BuildRequest, sandbox: str, installer: str) -> Step:
    spec = request.spec
    record = {
        "envbuild_version": request.facts.envbuild_version,
        "spec": {"name": spec.name, "sha256": request.spec_sha256},
        "system": spec.system,
        "base": spec.base.describe(),
        "installer": installer,
        "venv": VENV_PREFIX,
        "requirements": spec.python.requirements(),
    }
    actions: list[Action] = [
        MakeDirs((f"{sandbox}/.singularity.d/env", f"{sandbox}{RECORD_DIR}")),
        WriteFile(f"{sandbox}{ENV_SCRIPT}", env_script(spec, request.facts.envbuild_version, request.spec_sha256), 0o755),
        MergeJson(f"{sandbox}{LABELS_FILE}", tuple(image_labels(request, installer).items())),
        WriteFile(f"{sandbox}{RECORD_DIR}/spec.yaml", request.spec_text),
        WriteFile(f"{sandbox}{RECORD_DIR}/build.json", json.dumps(record, indent=2, sort_keys=True) + "\n"),
    ]
    for item in spec.files:
        src = item.src if item.src.startswith("/") else f"{request.spec_dir}/{item.src}"
        dest = f"{sandbox}{item.dest}"
        actions.append(MakeDirs((str(PurePosixPath(dest).parent),)))
        actions.append(CopyFile(src, dest, int(item.mode, 8) if item.mode else None))
    return Step("configure", "write environment script, labels and build record", tuple(actions))


# --- running inside the sandbox -------------------------------------------------------------------


def _exec(request: BuildRequest, sandbox: str, command: list[str], *, writable: bool,
          binds: list[_Bind] | None = None, env: list[tuple[str, str]] | None = None) -> Run:
    runtime = request.facts.runtime
    # --cleanenv: the host's environment (a venv's VIRTUAL_ENV, PYTHONPATH, PIP_*) must not leak
    # into the build. --no-mount: nothing of the host's home or working directory is written into
    # (or left as an empty mount point in) the image; writable steps also use the image's own /tmp,
    # while read-only test runs keep the host's /tmp, as every later run of the image will.
    argv = [runtime.path, "exec", "--cleanenv", "--no-mount", "home,cwd,tmp" if writable else "home,cwd", "--pwd", "/"]
    if writable:
        argv.append("--writable")
    for bind in binds or []:
        argv += ["--bind", bind.flag()]
    argv += [sandbox, *command]
    host_env = [(runtime.env_prefix + key, value) for key, value in (env or [])]
    host_env += [(runtime.env_prefix + key, value) for key, value in request.facts.proxy_env]
    return Run(tuple(argv), env=tuple(host_env))
