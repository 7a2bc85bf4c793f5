"""Pure build planner: (validated spec, recipe, host facts) -> the exact steps of a build.

The method is cotainr's, which needs neither fakeroot nor definition-file %post (neither works on
LUMI or on kernels without CAP_SYS_RESOURCE): base root filesystem -> writable sandbox directory ->
`apptainer exec --writable` to install -> `apptainer build image.sif sandbox/`.
Nothing here touches the filesystem or runs a program; `envbuild.build.executor` does that.
"""

from __future__ import annotations

import hashlib
import json
import shlex
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import TYPE_CHECKING

from envbuild.build.actions import (
    Action,
    ClampTimes,
    CopyFile,
    CopyTree,
    GuardTree,
    MakeDirs,
    MergeJson,
    RecordDigest,
    Remove,
    Rename,
    Run,
    SnapshotTree,
    Step,
    Touch,
    WriteFile,
    WriteRunWrappers,
)
from envbuild.build.layers import StorePaths, entry_name, env_compat_key, env_key, env_readable, image_key, installer_identity
from envbuild.build.request import BasePlan, BuildPlan, BuildRequest, Layers
from envbuild.host.facts import HostFacts
from envbuild.host.pip import local_path_of
from envbuild.spec.model import VENV_PREFIX, BaseImage, Spec

if TYPE_CHECKING:
    pass

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


def plan_layers(request: BuildRequest) -> Layers:
    spec, facts = request.spec, request.facts
    installer = _choose_installer(spec, facts)
    base_entry = base_cache_key(spec.base, facts, request.base.fingerprint)
    env = env_key(request, installer, base_entry)
    image = image_key(request, env)
    return Layers(
        base_entry=base_entry, env_entry=entry_name(env_readable(request), env), env_key=env,
        env_compat=env_compat_key(request, installer, base_entry),
        env_parent=request.env_parent, image_entry=entry_name(spec.name[:40], image), image_key=image,
    )


def plan_build(request: BuildRequest) -> BuildPlan:
    """The build after the base is in the store: env layer (cached) -> sandbox -> user layer -> image
    in the store -> copy to the output."""
    spec, facts = request.spec, request.facts
    store = StorePaths(str(facts.cache_dir))
    layers = plan_layers(request)
    work = f"{facts.cache_dir}/work/{spec.name}-{request.options.build_id}"
    sandbox = f"{work}/sandbox"
    installer = _choose_installer(spec, facts)
    requirements = tuple(spec.python.requirements())
    sources = _PackageSources.from_request(request)

    steps: list[Step] = [_env_step(request, layers, store, installer, sources)]
    env_rootfs = f"{store.env(layers.env_entry)}/rootfs"
    # The user layer only adds or atomically replaces files (configure, record), so the sandbox can
    # share the env layer's files by hard links, which makes this copy instant. `post` commands may
    # write files in place, and clamping times for SOURCE_DATE_EPOCH changes inodes: a real copy then.
    shared = not spec.post and request.options.source_date_epoch is None
    steps.append(Step("sandbox", "hard-link the env layer into a fresh sandbox" if shared else "copy the env layer into a fresh sandbox",
                      (Remove((work,)), MakeDirs((work,)), CopyTree(env_rootfs, sandbox, hardlink=shared))))
    steps.append(_configure_step(request, sandbox, installer, layers))
    if spec.post:
        steps.append(
            Step("post", f"run {len(spec.post)} post command(s)",
                 tuple(_exec(request, sandbox, ["/bin/sh", "-ec", cmd], writable=True) for cmd in spec.post))
        )
    steps.append(
        Step("record", "record every Python environment's packages",
             (_exec(request, sandbox, [f"{VENV_PREFIX}/bin/python", "-c", RECORD_ENVIRONMENTS_SCRIPT], writable=True),
              Remove((f"{sandbox}{HOST_MOUNT}",))))
    )
    if spec.tests:
        steps.append(
            Step("test", f"run {len(spec.tests)} test(s) inside the image",
                 tuple(_exec(request, sandbox, ["/bin/sh", "-ec", cmd], writable=False) for cmd in spec.tests))
        )
    entry = store.image(layers.image_entry)
    store_image = f"{entry}/image.sif"
    partial = f"{store_image}.partial-{request.options.build_id}"
    from envbuild.build.squash import squash_actions

    squash = squash_actions(sandbox, partial, compression=request.options.compression, source_date_epoch=request.options.source_date_epoch,
                            runtime_path=facts.runtime.path, work_dir=work, all_root=not request.options.as_root,
                            python=facts.python or None, processors=facts.cpus)
    steps.append(
        Step("squash", f"write the image ({request.options.compression}) into the store",
             (Remove((f"{entry}/complete",)), MakeDirs((entry,)),
              *((ClampTimes(sandbox, request.options.source_date_epoch),) if request.options.source_date_epoch is not None else ()),
              *squash, Rename(partial, store_image),
              WriteFile(f"{entry}/meta.json", _meta_json(request, "image", layers.image_key, layers.env_entry)),
              WriteFile(f"{entry}/complete", f"{spec.name}\n")),
             cleanup=(Remove((partial,)),))
    )
    output_partial = f"{request.options.output}.partial-{request.options.build_id}"
    steps.append(
        Step("output", f"copy the image to {request.options.output}",
             (CopyFile(store_image, output_partial), Rename(output_partial, request.options.output)),
             cleanup=(Remove((output_partial,)),))
    )
    steps.append(wrappers_step(request, f"{sandbox}{VENV_PREFIX}/bin"))
    if not request.options.keep_work:
        steps.append(Step("clean", "remove the build sandbox", (Remove((work,)),)))
    return BuildPlan(
        name=spec.name, output=request.options.output, work_dir=work, sandbox=sandbox, installer=installer,
        requirements=requirements, package_sources=sources.shown, layers=layers, store_image=store_image,
        steps=tuple(steps),
    )


def wrappers_step(request: BuildRequest, venv_bin: str) -> Step:
    out_dir = str(PurePosixPath(request.options.output).parent)
    return Step("wrappers", f"write run wrappers to {out_dir}/bin",
                (WriteRunWrappers(venv_bin, f"{out_dir}/bin", request.options.output, request.spec.system,
                                  request.facts.runtime.name),))


# name==version of every distribution in the running interpreter's environment, one per line.
FREEZE_SCRIPT = ("import importlib.metadata as m; "
                 "print(chr(10).join(sorted({d.metadata['Name'] + '==' + d.version for d in m.distributions() if d.metadata['Name']})))")
# The same, written to the file named by the first argument.
FREEZE_TO_FILE_SCRIPT = ("import importlib.metadata as m, sys; "
                         "open(sys.argv[1], 'w').write(''.join(sorted({d.metadata['Name'] + '==' + d.version + chr(10) "
                         "for d in m.distributions() if d.metadata['Name']})))")


# Runs inside the image with the venv's Python: adds `environments` (name==version of every Python
# environment found: the venv, the system Python, conda) to the build record. importlib.metadata is
# used rather than `pip freeze`, which a base's Python may lack.
RECORD_ENVIRONMENTS_SCRIPT = f"""\
import glob, json, os, subprocess
LIST = {FREEZE_SCRIPT!r}
found = {{}}
candidates = ["{VENV_PREFIX}/bin/python", "/usr/bin/python3", "/usr/local/bin/python3", "/opt/conda/bin/python"]
candidates += sorted(glob.glob("/opt/conda/envs/*/bin/python"))
for python in candidates:
    if os.path.exists(python):
        out = subprocess.run([python, "-I", "-c", LIST], capture_output=True, text=True)
        if out.returncode == 0:
            found[python] = out.stdout.split()
record_file = "{RECORD_DIR}/build.json"
with open(record_file) as handle:
    record = json.load(handle)
record["environments"] = found
def replace(path, text):
    # Atomically: the file may be a hard link into the store's env layer.
    with open(path + ".partial", "w") as handle:
        handle.write(text)
    os.replace(path + ".partial", path)
replace(record_file, json.dumps(record, indent=2, sort_keys=True) + "\\n")
replace("{RECORD_DIR}/pip-freeze.txt", "".join(line + "\\n" for line in found.get("{VENV_PREFIX}/bin/python", [])))
"""


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


def plan_base(request: BuildRequest) -> BasePlan:
    """Steps that put the base root filesystem into the store once and record its content digest."""
    spec, facts = request.spec, request.facts
    base = spec.base
    name = base_cache_key(base, facts, request.base.fingerprint)
    entry = StorePaths(str(facts.cache_dir)).base(name)
    partial, rootfs, marker, digest_file = f"{entry}/rootfs.partial", f"{entry}/rootfs", f"{entry}/complete", f"{entry}/digest"
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
        source = request.base.path if base.kind == "localimage" else base.ref
        fetch = (Run((*_sandbox_build(request), partial, str(source))),)
        cleanup = (Remove((partial,)),)
        title = f"unpack base {base.describe()} (cached after the first build)"
    # A local .sif is identified by its own bytes (what `sha256sum` shows); every other base by the
    # content of the unpacked tree (docker layers arrive in no canonical form).
    digest_of = request.base.path if (base.kind == "localimage" and request.base.path and _is_sif(request.base.path)) else rootfs
    ensure = Step(
        "base", title,
        (Remove((partial, rootfs, digest_file)), MakeDirs((entry,)), *fetch, Rename(partial, rootfs),
         RecordDigest(digest_of, digest_file),
         WriteFile(f"{entry}/meta.json", _meta_json(request, "base", name, None)),
         WriteFile(marker, base.describe() + "\n")),
        skip_if_exists=marker, cleanup=cleanup, lock=("base", name),
    )
    # Entries made before digests were recorded get theirs on first use.
    digest = Step("base-digest", "record the base's content digest", (RecordDigest(digest_of, digest_file),),
                  skip_if_exists=digest_file, lock=("base", name))
    return BasePlan(entry=entry, rootfs=rootfs, digest_file=digest_file, steps=(ensure, digest))


def _is_sif(path: str) -> bool:
    return path.endswith((".sif", ".simg", ".img"))


def _env_step(request: BuildRequest, layers: Layers, store: StorePaths, installer: str, sources: _PackageSources) -> Step:
    """The env layer: the base (or a parent env layer) plus the venv with every requirement installed."""
    entry = store.env(layers.env_entry)
    partial, rootfs = f"{entry}/rootfs.partial", f"{entry}/rootfs"
    start = f"{store.env(layers.env_parent)}/rootfs" if layers.env_parent else f"{store.base(layers.base_entry)}/rootfs"
    actions: list[Action] = [Remove((partial, rootfs)), MakeDirs((entry,))]
    snapshot = f"{entry}/parent.snapshot"
    if layers.env_parent:
        # Only the difference is installed, so the parent's 1-2 GB are shared by hard links instead
        # of copied (about 20 s on ext4). Installers add, replace and delete files; should one ever
        # write through a shared file (two packages shipping the same file), the guard below notices
        # and retires the parent layer, whose content would no longer match its key.
        actions += [SnapshotTree(start, snapshot), CopyTree(start, partial, hardlink=True)]
    else:
        actions.append(CopyTree(start, partial))
    actions += _venv_actions(request, partial)
    requirements = tuple(request.spec.python.requirements())
    if request.lock.requirements is not None or requirements:
        actions += _install_actions(request, partial, installer, requirements, sources)
    freeze_inside = f"{HOST_MOUNT}/freeze.txt"
    freeze = f"{partial}{freeze_inside}"
    actions += [
        MakeDirs((f"{partial}{HOST_MOUNT}",)),
        _exec(request, partial, [f"{VENV_PREFIX}/bin/python", "-I", "-c", FREEZE_TO_FILE_SCRIPT, freeze_inside], writable=True),
        Rename(freeze, f"{entry}/freeze.txt"),
        Remove((f"{partial}{HOST_MOUNT}",)),
        *((GuardTree(start, snapshot, f"{store.env(layers.env_parent)}/complete"), Remove((snapshot,)))
          if layers.env_parent else ()),
        Rename(partial, rootfs),
        WriteFile(f"{entry}/meta.json", _meta_json(request, "env", layers.env_key, layers.env_parent or layers.base_entry,
                                                   compat=layers.env_compat, installer=installer)),
        WriteFile(f"{entry}/complete", f"{request.spec.name}\n"),
    ]
    what = f"install the difference on top of env layer {layers.env_parent}" if layers.env_parent else "create the venv and install"
    return Step("env", f"Python env layer: {what} (cached after the first build)", tuple(actions),
                skip_if_exists=f"{entry}/complete", cleanup=(Remove((partial, snapshot)),), lock=("env", layers.env_entry))


def _meta_json(request: BuildRequest, kind: str, key: str, parent: str | None, **extra: str) -> str:
    """The store entry's description (envbuild cache ls; parent choice for env layers)."""
    spec = request.spec
    record: dict[str, object] = {
        "kind": kind, "key": key, "created": request.options.built_at, "spec": spec.name, "parent": parent,
        "description": _describe_entry(request, kind),
    }
    if kind == "env":
        record["requirements"] = list(spec.python.requirements())
        record["locked"] = request.lock.requirements is not None
    record.update(extra)
    return json.dumps(record, indent=2, sort_keys=True) + "\n"


def _describe_entry(request: BuildRequest, kind: str) -> str:
    spec = request.spec
    if kind == "base":
        return spec.base.describe()
    if kind == "env":
        reqs = " ".join(spec.python.requirements()) or "no packages"
        return f"{reqs} on {spec.base.describe()}" + (" (locked)" if request.lock.requirements is not None else "")
    return f"{spec.name} ({request.options.compression})"


def _sandbox_build(request: BuildRequest) -> tuple[str, ...]:
    argv = [request.facts.runtime.path, "build", "--force", "--sandbox"]
    if not request.options.as_root:
        argv.append("--fix-perms")  # an unprivileged user must own every file to write into the sandbox
    return tuple(argv)


# --- python ---------------------------------------------------------------------------------------


def _venv_actions(request: BuildRequest, sandbox: str) -> list[Action]:
    interpreter = shlex.quote(request.spec.python.interpreter)
    # A base built by envbuild (or a parent env layer) already has the venv: install into it instead
    # of re-creating it (its `python3` would be the venv's own interpreter).
    script = (f"if [ -x {VENV_PREFIX}/bin/python ]; then echo 'reusing the venv {VENV_PREFIX}'; "
              f"else {interpreter} -m venv {VENV_PREFIX}; fi")
    actions: list[Action] = [_exec(request, sandbox, ["/bin/sh", "-ec", script], writable=True)]
    if request.lock.python:
        # A lock pins wheels for one Python (cp311...): refuse a base whose Python differs before
        # the installer fails on some wheel with a less helpful message.
        check = (f"import sys; v = '%d.%d' % sys.version_info[:2]; "
                 f"sys.exit(0 if v == {request.lock.python!r} else 'the lock was made for Python {request.lock.python}, "
                 f"but the base has Python ' + v + ': run envbuild lock again')")
        actions.append(_exec(request, sandbox, [f"{VENV_PREFIX}/bin/python", "-I", "-c", check], writable=False))
    return actions


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


def _install_actions(request: BuildRequest, sandbox: str, installer: str, requirements: tuple[str, ...],
                     sources: _PackageSources) -> list[Action]:
    facts = request.facts
    binds = list(sources.binds)
    env: list[tuple[str, str]] = []
    actions: list[Action] = []
    if request.lock.requirements is not None:
        # Exactly the lock: every pinned file checked against its hash, no resolution, no extras.
        lock_inside = f"{HOST_MOUNT}/lock/requirements.txt"
        actions += [MakeDirs((f"{sandbox}{HOST_MOUNT}/lock",)), WriteFile(f"{sandbox}{lock_inside}", request.lock.requirements)]
        targets = ["--require-hashes", "--no-deps", "-r", lock_inside]
    else:
        targets = list(requirements)
    if installer == "uv":
        assert facts.uv is not None
        uv_inside = f"{HOST_MOUNT}/uv"
        binds.append(_Bind(facts.uv, uv_inside, is_file=True))
        binds.append(_Bind(f"{facts.cache_dir}/uv", f"{HOST_MOUNT}/cache", read_only=False))
        argv = [uv_inside, "pip", "install", "--python", f"{VENV_PREFIX}/bin/python",
                # Compile now: in a read-only image Python would recompile on every start.
                "--compile-bytecode", "--link-mode=copy", "--cache-dir", f"{HOST_MOUNT}/cache",
                *sources.uv_args(), *targets]
        if sources.cert:
            env.append(("SSL_CERT_FILE", sources.cert))
        if sources.client_cert:
            env.append(("SSL_CLIENT_CERT", sources.client_cert))
        host_cache = f"{facts.cache_dir}/uv"
    else:
        binds.append(_Bind(f"{facts.cache_dir}/pip", f"{HOST_MOUNT}/cache", read_only=False))
        argv = [f"{VENV_PREFIX}/bin/python", "-m", "pip", "install", "--no-input", "--disable-pip-version-check",
                "--cache-dir", f"{HOST_MOUNT}/cache", *sources.pip_args(), *targets]
        host_cache = f"{facts.cache_dir}/pip"
    mount_dirs = tuple(f"{sandbox}{b.inside}" for b in binds if not b.is_file)
    mount_files = tuple(f"{sandbox}{b.inside}" for b in binds if b.is_file)
    actions.append(MakeDirs((host_cache, *mount_dirs)))
    if mount_files:
        actions.append(Touch(mount_files))
    actions.append(_exec(request, sandbox, argv, writable=True, binds=binds, env=env))
    return actions


def host_index_args(request: BuildRequest) -> list[str]:
    """uv's index flags for resolving on the host (envbuild lock): the host's sources as they are,
    the variant's PyTorch index first among the extra indexes."""
    pip = request.facts.pip
    torch_index = _torch_index(request)
    extras = ((torch_index,) if torch_index else ()) + pip.extra_index_urls
    args: list[str] = ["--no-index"] if pip.no_index else []
    if pip.index_url:
        args += ["--index-url", pip.index_url]
    for url in extras:
        args += ["--extra-index-url", url]
    for link in pip.find_links:
        args += ["--find-links", link]
    for host in pip.trusted_hosts:
        args += ["--allow-insecure-host", host]
    return [*args, "--index-strategy", "unsafe-best-match"]


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


def image_labels(request: BuildRequest, installer: str, layers: Layers) -> dict[str, str]:
    spec = request.spec
    labels = {
        "org.envbuild.version": request.facts.envbuild_version,
        "org.envbuild.spec-name": spec.name,
        "org.envbuild.spec-sha256": request.source.sha256,
        "org.envbuild.system": spec.system,
        "org.envbuild.base": spec.base.describe(),
        "org.envbuild.installer": installer,
        "org.envbuild.venv": VENV_PREFIX,
        "org.envbuild.base-digest": request.base.digest,
        "org.envbuild.image-key": layers.image_key,
    }
    if request.lock.sha256:
        labels["org.envbuild.lock-sha256"] = request.lock.sha256
    labels.update(spec.labels)
    return labels


def build_record(request: BuildRequest, installer: str, layers: Layers) -> dict[str, object]:
    """The provenance record embedded as /.envbuild/build.json (the record step adds `environments`)."""
    spec, facts = request.spec, request.facts
    return {
        "record_format": 2,
        "envbuild_version": facts.envbuild_version,
        "built_at": request.options.built_at,
        "spec": {"name": spec.name, "sha256": request.source.sha256},
        "lock": {"sha256": request.lock.sha256, "python": request.lock.python} if request.lock.text else None,
        "system": spec.system,
        "recipe": {"name": spec.system, "sha256": request.recipe_digest},
        "base": {"ref": spec.base.describe(), "digest": request.base.digest},
        "installer": installer_identity(request, installer),
        "runtime": {"name": facts.runtime.name, "version": facts.runtime_version},
        "build_host": dict(facts.host_info),
        "compression": request.options.compression,
        "layers": {"base": layers.base_entry, "env": layers.env_key, "env_parent": layers.env_parent,
                   "image": layers.image_key},
        "venv": VENV_PREFIX,
        "requirements": spec.python.requirements(),
    }


def _configure_step(request: BuildRequest, sandbox: str, installer: str, layers: Layers) -> Step:
    spec = request.spec
    record = build_record(request, installer, layers)
    actions: list[Action] = [
        MakeDirs((f"{sandbox}/.singularity.d/env", f"{sandbox}{RECORD_DIR}")),
        WriteFile(f"{sandbox}{ENV_SCRIPT}", env_script(spec, request.facts.envbuild_version, request.source.sha256), 0o755),
        MergeJson(f"{sandbox}{LABELS_FILE}", tuple(image_labels(request, installer, layers).items())),
        WriteFile(f"{sandbox}{RECORD_DIR}/spec.yaml", request.source.text),
        WriteFile(f"{sandbox}{RECORD_DIR}/build.json", json.dumps(record, indent=2, sort_keys=True) + "\n"),
    ]
    if request.lock.text:
        actions.append(WriteFile(f"{sandbox}{RECORD_DIR}/spec.lock", request.lock.text))
    for item in spec.files:
        src = item.src if item.src.startswith("/") else f"{request.source.directory}/{item.src}"
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
    if request.options.source_date_epoch is not None:
        # Python then writes hash-based .pyc files (no source times inside): reproducible byte code.
        host_env.append((runtime.env_prefix + "SOURCE_DATE_EPOCH", str(request.options.source_date_epoch)))
    return Run(tuple(argv), env=tuple(host_env))
