"""Pure planner for venv overlays: (request, what the base has) -> the steps that make NAME.sqsh.

What LUMI users do by hand (LUMI AI guide, workshop exercise 07, EasyBuild `make-squashfs`), as a plan:
the base's own Python makes a venv with --system-site-packages at the mount point (a host directory
bound there, so the base stays read-only and is never unpacked), pip installs only what the base lacks,
the venv is squashed into one file and copied out. Running it: envrun --image BASE --overlay NAME.sqsh.

The overlay must count what the base provides as installed. pip in the overlay's venv sees every package
on its sys.path; uv looks only at the environment it installs into, and in the overlay's venv reinstalled a
package the base venv had. So uv (where envbuild has one, the faster installer) is used in two steps: a dry
run against the base's own environment says what the base lacks, as pip would decide it, then exactly those
distributions go into the venv without resolving again. That holds only where the base's Python has all its
packages in its own environment (one site directory, under its prefix: an envbuild image's venv, a conda
env); a base that inherits directories from elsewhere, or a build from a lock, installs with pip, and
envbuild's own pip is bound in, so a base without pip works the same.
"""

from __future__ import annotations

import hashlib
import json
import shlex
from collections.abc import Callable
from dataclasses import dataclass

from envbuild.builder.plan.actions import (
    Action,
    CheckTorchFamily,
    MakeDirs,
    RecordDigest,
    Remove,
    Rename,
    Run,
    Step,
    WriteFile,
    WriteRunWrappers,
)
from envbuild.builder.plan.imageplan import IMAGE_DIR_MODE, output_step
from envbuild.builder.plan.install import BASE_PTH_SCRIPT, PackageSources
from envbuild.builder.plan.layers import base_cache_key, sources_identity
from envbuild.builder.plan.overlayprobe import PROBE_PYTHON, PROBE_SHELL, BaseProbe, in_base
from envbuild.builder.plan.plandata import BuildRequest
from envbuild.builder.plan.sandbox import HOST_MOUNT, Bind, sandbox_exec
from envbuild.envspec.torchfamily import TORCH_FAMILY
from envbuild.recipes.ops import system_argument
from envbuild.shared.errors import EnvbuildError
from envbuild.shared.overlayformat import LOCK_FILE, OVERLAY_RECORD_FORMAT, RECORD_DIR, RECORD_FILE, SPEC_FILE
from envbuild.store.layout import EntryPaths, StorePaths

# Bump when what an overlay contains changes for the same inputs, so older store entries are not reused.
OVERLAY_LAYOUT_VERSION = 2
# Run by the overlay's Python after installing: the packages in the overlay itself go into the record.
RECORD_ADDED_SCRIPT = """\
import importlib.metadata as md, json, os, sys, sysconfig
record_file = sys.argv[1]
own = sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})
added = sorted({d.metadata["Name"] + "==" + d.version for d in md.distributions(path=own) if d.metadata["Name"]})
with open(record_file) as handle:
    record = json.load(handle)
record["packages"]["added"] = added
with open(record_file + ".partial", "w") as handle:
    json.dump(record, handle, indent=2, sort_keys=True)
    handle.write(chr(10))
os.replace(record_file + ".partial", record_file)
print("added to the overlay: " + (" ".join(added) or "nothing"))
"""


# Said by the install step when uv's dry run printed neither a package to install nor that it would change nothing.
UNREADABLE_DRY_RUN = ("envbuild: uv's dry run against the base (above) lists no package to install in a form envbuild "
                      "reads; fix: report it with uv's version; meanwhile `envbuild lock SPEC` then `envbuild build SPEC "
                      "--locked` installs the overlay with pip")


@dataclass(frozen=True)
class RequirementSplit:
    kept: tuple[str, ...]  # "name==version" of the base's distributions that satisfy a requirement (the record's format)
    added: tuple[str, ...]  # requirements the base does not satisfy: installed into the overlay


@dataclass(frozen=True)
class OverlayBasePlan:
    entry: str  # store entry with the base's digest and probes
    digest_file: str
    probe_file: str
    steps: tuple[Step, ...]


@dataclass(frozen=True)
class OverlayPlan:
    name: str
    output: str
    work_dir: str
    venv_dir: str
    mount: str
    key: str
    entry: str  # store entry name
    store_overlay: str
    kept: tuple[str, ...]
    added: tuple[str, ...]
    constraints: tuple[str, ...]
    package_sources: tuple[str, ...]
    steps: tuple[Step, ...]


def _canonical(name: str) -> str:
    from packaging.utils import canonicalize_name

    return canonicalize_name(name)


def split_requirements(requirements: list[str], probe: BaseProbe) -> RequirementSplit:
    """Which requirements the base already satisfies (kept there) and which the overlay installs.
    A requirement with extras is installed (pip skips what is there, and adds the extras' packages)."""
    from packaging.requirements import Requirement

    installed = probe.installed()
    kept, added = [], []
    for text in requirements:
        req = Requirement(text)
        have = installed.get(_canonical(req.name))
        if have and not req.extras and not req.url and req.specifier.contains(have[1], prereleases=True):
            pin = f"{have[0]}=={have[1]}"  # read back with parse_pin by verify and the inventory
            if pin not in kept:
                kept.append(pin)
        else:
            added.append(text)
    return RequirementSplit(kept=tuple(kept), added=tuple(added))


def check_torch(requirements: list[str], probe: BaseProbe, *, allowed: bool, spec_path: str) -> None:
    """A torch other than the base's is refused: the base's ROCm/CUDA libraries, RCCL/NCCL plugins and
    every extension in it were built for its torch."""
    from packaging.requirements import Requirement

    installed = probe.installed()
    for text in requirements:
        req = Requirement(text)
        name = _canonical(req.name)
        have = installed.get(name)
        if name in TORCH_FAMILY and have and not req.specifier.contains(have[1], prereleases=True) and not allowed:
            raise EnvbuildError(
                f"{spec_path}: the overlay asks for {text}, but the base has {have[0]} {have[1]} (in {probe.prefix}); "
                "a different torch in an overlay would not match the ROCm/CUDA libraries and extensions the base "
                "was built with",
                f"drop the requirement (the base's {have[1]} is used), choose a base image with the torch you need, "
                "or, knowing the risk, set overlay: {allow_torch_change: true}",
            )


def base_family(probe: BaseProbe) -> list[tuple[str, str]]:
    """(name, version) of the torch family (envbuild.envspec.torchfamily) in the base, which the overlay's Python
    imports: their binaries are built against the base's torch and its ROCm/CUDA libraries."""
    installed = probe.installed()
    return [installed[name] for name in TORCH_FAMILY if name in installed]


def torch_constraints(probe: BaseProbe, *, allowed: bool) -> tuple[str, ...]:
    """The base's torch family pinned while installing, so that no dependency pulls a second torch into the overlay."""
    return () if allowed else tuple(f"{name}=={version}" for name, version in base_family(probe))


def base_entry_name(request: BuildRequest) -> str:
    return "base-" + base_cache_key(request.spec.base, request.facts, request.base.fingerprint)


def plan_overlay_base(request: BuildRequest) -> OverlayBasePlan:
    """The base .sif's content digest (cached by its size and time) and its Python probe (cached per digest)."""
    assert request.base.path, "an overlay's base is a local .sif (checked when the spec is loaded)"
    name = base_entry_name(request)
    entry = StorePaths(str(request.facts.cache_dir)).overlay(name)
    override = request.spec.overlay.python or "" if request.spec.overlay else ""
    probe_file = entry.probe(override)
    digest = Step("base-digest", f"record the content digest of {request.base.path} (once per base file)",
                  (MakeDirs((entry.dir,)), RecordDigest(request.base.path, entry.digest),
                   WriteFile(entry.complete, request.spec.base.describe() + "\n")),
                  skip_if_exists=entry.digest, lock=("overlay", name))
    partial = f"{probe_file}.partial"
    inside = f"{HOST_MOUNT}/{partial.rsplit('/', 1)[1]}"
    probe = Step(
        "base-python", "find the base's Python and what it has installed (once per base file)",
        (Remove((partial,)),
         sandbox_exec(request, request.base.path, ["/bin/sh", "-c", PROBE_SHELL, "envbuild-probe", override, inside,
                                                   PROBE_PYTHON],
                      writable=False, binds=[Bind(entry.dir, HOST_MOUNT, read_only=False)]),
         Rename(partial, probe_file)),
        skip_if_exists=probe_file, cleanup=(Remove((partial,)),), lock=("overlay", name),
    )
    return OverlayBasePlan(entry=entry.dir, digest_file=entry.digest, probe_file=probe_file, steps=(digest, probe))


def overlay_installer(request: BuildRequest, probe: BaseProbe) -> str:
    """"uv" where a dry run of uv against the base's environment sees everything the base's Python imports
    (see the module's docstring) and the overlay resolves (no lock); else "pip"."""
    # A distribution's own Python (prefix /usr) is left to pip: Debian's keeps its packages where its sysconfig
    # does not say, and uv may not see them.
    own_site = (len(probe.site_dirs) == 1 and probe.prefix.rstrip("/") not in ("", "/usr", "/usr/local")
                and probe.site_dirs[0].startswith(probe.prefix.rstrip("/") + "/"))
    return "uv" if request.facts.uv and own_site and request.lock.requirements is None else "pip"


def installer_label(request: BuildRequest, probe: BaseProbe) -> str:
    """The installer and its version, as the overlay's key holds it."""
    if overlay_installer(request, probe) == "uv":
        return f"uv {request.facts.uv_version or 'unknown'}"
    return f"pip {request.facts.pip_version or 'unknown'}"


def overlay_key(request: BuildRequest, probe: BaseProbe) -> str:
    """Everything that decides the overlay's bytes: same inputs, same key, on any machine."""
    pip = request.facts.pip
    identity = {
        "layout": OVERLAY_LAYOUT_VERSION, "envbuild": request.facts.envbuild_version,
        "spec": request.source.sha256, "lock": request.lock.sha256, "base_digest": request.base.digest,
        # The record names the base's path (envrun --overlay without --image runs on it, and its errors
        # name it): the same base at another path gets its own overlay (a few seconds to build).
        "base_path": request.base.path,
        "python": probe.as_record(), "base_packages": list(probe.packages),
        "installer": installer_label(request, probe),
        "sources": sources_identity(pip),
        "compression": request.options.compression, "epoch": request.options.source_date_epoch,
    }
    return hashlib.sha256(json.dumps(identity, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def overlay_record(request: BuildRequest, probe: BaseProbe, split: RequirementSplit, key: str) -> dict[str, object]:
    """overlay.json as the build writes it (the record step fills packages.added from the venv)."""
    spec, facts = request.spec, request.facts
    assert spec.overlay is not None
    return {
        "record_format": OVERLAY_RECORD_FORMAT, "kind": "overlay", "envbuild_version": facts.envbuild_version,
        "built_at": request.options.built_at, "name": spec.name,
        "spec": {"name": spec.name, "sha256": request.source.sha256},
        "lock": {"sha256": request.lock.sha256, "python": request.lock.python} if request.lock.text else None,
        "system": spec.system, "mount": spec.overlay.mount, "key": key,
        "base": {"ref": spec.base.describe(), "path": request.base.path, "digest": request.base.digest,
                 "sif_id": request.base.sif_id, "size": request.base.size},
        "python": probe.as_record(), "requirements": spec.python.requirements(),
        "packages": {"kept": list(split.kept), "added": []},
        "installer": {"name": overlay_installer(request, probe),
                      "version": facts.uv_version if overlay_installer(request, probe) == "uv" else facts.pip_version},
        "compression": request.options.compression, "build_host": dict(facts.host_info),
    }


def plan_overlay(request: BuildRequest, probe: BaseProbe, *, spec_path: str = "the spec") -> OverlayPlan:
    spec, facts, options = request.spec, request.facts, request.options
    overlay = spec.overlay
    assert overlay is not None and request.base.path
    requirements = spec.python.requirements()
    _check_mount(overlay.mount, probe, spec_path)
    check_torch(requirements, probe, allowed=overlay.allow_torch_change, spec_path=spec_path)
    split = split_requirements(requirements, probe)
    key = overlay_key(request, probe)
    store = StorePaths(str(facts.cache_dir))
    entry_name = f"{spec.name[:40]}-{key[:16]}"
    entry = store.overlay(entry_name)
    work = store.work(f"{spec.name}-{options.build_id}")
    venv, host = f"{work}/venv", f"{work}/host"
    mount, base = overlay.mount, request.base.path
    python = f"{mount}/bin/python"
    writable_venv = Bind(venv, mount, read_only=False)
    host_bind = Bind(host, HOST_MOUNT, read_only=False)

    def run(argv: list[str], binds: list[Bind], env: list[tuple[str, str]] | None = None) -> Run:
        return sandbox_exec(request, base, in_base(probe, argv), writable=False, binds=binds, env=env)

    # The venv is the overlay's root directory: 0755 whatever the umask, as what the tools write in it.
    # The venv, its .pth, the install and the record in one container start (each start mounts the base image
    # again): the directories are made on the host first, the venv by the first lines of the install's script.
    # (The venv writes into the directory the record's files are already in: `venv` without --clear keeps them.)
    work_dirs: list[Action] = [Remove((work,)), MakeDirs((host,)), MakeDirs((venv,), IMAGE_DIR_MODE)]
    make_venv = (shlex.join([probe.python, "-m", "venv", "--system-site-packages", "--without-pip", mount]) + "\n"
                 + shlex.join([python, "-c", BASE_PTH_SCRIPT, *probe.site_dirs]) + "\n")
    made = f"make the venv at {mount} with the base's {probe.python} (Python {probe.version}), "
    steps = [Step("work", f"make the build's work directories (the venv's at {venv})", tuple(work_dirs))]
    record = overlay_record(request, probe, split, key)
    record_file = f"{venv}/{RECORD_FILE}"
    # The venv was written by the base's Python: inside it, every path is resolved as in the overlay's tree.
    record_files: list[Action] = [
        MakeDirs((f"{venv}/{RECORD_DIR}",), IMAGE_DIR_MODE, root=venv),
        WriteFile(record_file, json.dumps(record, indent=2, sort_keys=True) + "\n", root=venv),
        WriteFile(f"{venv}/{SPEC_FILE}", request.source.text, root=venv),
        *((WriteFile(f"{venv}/{LOCK_FILE}", request.lock.text, root=venv),) if request.lock.text else ()),
    ]
    record_added = (python, "-c", RECORD_ADDED_SCRIPT, f"{mount}/{RECORD_FILE}")
    constraints = torch_constraints(probe, allowed=overlay.allow_torch_change)
    sources = PackageSources.from_request(request)
    # After installing, before tests and squashing: what the overlay installed must be built for the variant
    # of the base's torch, which its Python imports.
    check = CheckTorchFamily(venv, "/", f"the overlay {spec.name} on {base}",
                             tuple(f"{name}=={version}" for name, version in base_family(probe)))
    if request.lock.requirements is not None:
        _check_lock_python(request, probe, spec_path)
        steps.append(_install_step(request, ("--require-hashes", "--no-deps", "-r", f"{HOST_MOUNT}/lock.txt"), constraints,
                                   sources, run, writable_venv, host, host_bind, python,
                                   files={f"{host}/lock.txt": request.lock.requirements}, check=check,
                                   record=(record_files, record_added), before=make_venv, title_before=made))
    elif split.added and overlay_installer(request, probe) == "uv":
        steps.append(_uv_install_step(request, probe, split.added, constraints, sources, run, writable_venv, venv, host,
                                      host_bind, python, check=check, record=(record_files, record_added),
                                      before=make_venv, title_before=made))
    elif split.added:
        steps.append(_install_step(request, split.added, constraints, sources, run, writable_venv, host, host_bind, python,
                                   check=check, record=(record_files, record_added), before=make_venv, title_before=made))
    else:
        steps.append(Step("record", f"{made}record how the overlay was made and what it added", (
            *record_files, run(["/bin/sh", "-ec", make_venv + shlex.join(["exec", *record_added])], [writable_venv]))))
    if spec.tests:
        read_only = Bind(venv, mount)
        steps.append(Step("test", f"run {len(spec.tests)} test(s) with the overlay on the base", tuple(
            run(["/bin/sh", "-ec", f'PATH="{mount}/bin:$PATH" VIRTUAL_ENV="{mount}"; export PATH VIRTUAL_ENV\n{cmd}'],
                [read_only]) for cmd in spec.tests)))
    steps.append(_squash_step(request, entry, key, venv, overlay.processors))
    steps.append(output_step(request, entry.overlay, f"copy the overlay to {options.output}"))
    steps.append(overlay_wrappers_step(request, probe, f"{venv}/bin", root=venv))
    if not options.keep_work:
        steps.append(Step("clean", "remove the build's venv directory", (Remove((work,)),)))
    return OverlayPlan(
        name=spec.name, output=options.output, work_dir=work, venv_dir=venv, mount=mount, key=key, entry=entry_name,
        store_overlay=entry.overlay, kept=split.kept, added=split.added, constraints=constraints,
        package_sources=sources.shown, steps=tuple(steps),
    )


def overlay_wrappers_step(request: BuildRequest, probe: BaseProbe, venv_bin: str, *, root: str | None = None) -> Step:
    """bin/python, bin/torchrun, ... next to the overlay: exec into the base with the overlay mounted. `root`:
    the venv directory `venv_bin` lies in; None where `venv_bin` is the overlay file."""
    from pathlib import PurePosixPath

    assert request.spec.overlay is not None and request.base.path
    output = request.options.output
    out_dir = str(PurePosixPath(output).parent)
    # torchrun lives in the base; its wrapper runs it with the overlay's Python (see envbuild.launch.shims)
    extra = ("torchrun",) if "torch" in probe.installed() else ()
    return Step("wrappers", f"write run wrappers to {out_dir}/bin", (WriteRunWrappers(
        venv_bin, f"{out_dir}/bin", request.base.path, system_argument(request.recipe), request.facts.runtime.name,
        overlays=((output, request.spec.overlay.mount),), extra_commands=extra, venv_root=root),))


def _check_mount(mount: str, probe: BaseProbe, spec_path: str) -> None:
    """The overlay must not hide the base's own Python environment (its prefix, interpreter and site directories)."""
    for path in (probe.prefix, probe.python, *probe.site_dirs):
        if path == mount or path.startswith(mount.rstrip("/") + "/"):
            raise EnvbuildError(f"{spec_path}: overlay.mount {mount} would hide the base's Python environment {path}",
                                "mount the overlay elsewhere, e.g. overlay: {mount: /user-software}")


def _check_lock_python(request: BuildRequest, probe: BaseProbe, spec_path: str) -> None:
    if request.lock.python and request.lock.python != probe.minor:
        raise EnvbuildError(f"{spec_path}: the lock was made for Python {request.lock.python}, but the base's "
                            f"{probe.python} is Python {probe.version}", f"run `envbuild lock {spec_path}` again")


def _install_step(request: BuildRequest, targets: tuple[str, ...], constraints: tuple[str, ...], sources: PackageSources,
                  run: Callable[..., Run], writable_venv: Bind | None, host: str, host_bind: Bind, python: str, *,
                  files: dict[str, str] | None = None, pip_options: tuple[str, ...] = ("install",),
                  title: str = "", check: CheckTorchFamily | None = None,
                  env: tuple[tuple[str, str], ...] = (),
                  record: tuple[list[Action], tuple[str, ...]] | None = None, before: str = "",
                  title_before: str = "") -> Step:
    """pip in the base with the overlay's venv. `record`: the overlay's record files, written before, and the
    command that adds what pip installed to the record, run after pip in the same container start; `before`,
    shell lines run first in that start (with `record`), and `title_before` what they do, for the title."""
    facts = request.facts
    if not facts.pip_module:
        raise EnvbuildError("envbuild's own environment has no pip, which overlays install with",
                            "reinstall envbuild (bash provision/python-env.sh) or `python -m ensurepip` in its venv")
    cache = StorePaths(str(facts.cache_dir)).download_cache("pip")
    binds = [*((writable_venv,) if writable_venv else ()), host_bind, Bind(facts.pip_module, f"{HOST_MOUNT}/pylib/pip"),
             Bind(cache, f"{HOST_MOUNT}/cache", read_only=False), *sources.binds]
    argv = [python, "-m", "pip", *pip_options, "--no-input", "--disable-pip-version-check", "--no-warn-script-location",
            "--cache-dir", f"{HOST_MOUNT}/cache", *sources.pip_args(), "--constraint", f"{HOST_MOUNT}/constraints.txt",
            *targets]
    mount_points = [f"{host}/pylib/pip", f"{host}/cache", *(f"{host}{b.inside[len(HOST_MOUNT):]}" for b in sources.binds
                                                             if not b.is_file)]
    bound_files = [f"{host}{b.inside[len(HOST_MOUNT):]}" for b in sources.binds if b.is_file]
    # `host` is bound into the base's containers: what is written there is resolved inside it.
    actions: list[Action] = [
        MakeDirs((cache,)), MakeDirs(tuple(mount_points), root=host),
        WriteFile(f"{host}/constraints.txt", "".join(c + "\n" for c in constraints), root=host),
        *(WriteFile(path, "", root=host) for path in bound_files),  # mount points of bound files
        *(WriteFile(path, text, root=host) for path, text in (files or {}).items()),
        *(record[0] if record else ()),
        run(argv if record is None else ["/bin/sh", "-ec", f"{before}{shlex.join(argv)}\n{shlex.join(['exec', *record[1]])}"],
            binds, env=[("PYTHONPATH", f"{HOST_MOUNT}/pylib"), *env, *sources.credential_env("pip")]),
        *((check,) if check else ()),
    ]
    what = "exactly the lock" if "--require-hashes" in targets else " ".join(targets) + " (what the base lacks)"
    recorded = ", then record how the overlay was made and what it added" if record else ""
    return Step("install", title or f"{title_before}pip install {what}{recorded}", tuple(actions))


def _uv_install_step(request: BuildRequest, probe: BaseProbe, targets: tuple[str, ...], constraints: tuple[str, ...],
                     sources: PackageSources, run: Callable[..., Run], writable_venv: Bind, venv: str, host: str,
                     host_bind: Bind, python: str, *, check: CheckTorchFamily,
                     record: tuple[list[Action], tuple[str, ...]], before: str = "", title_before: str = "") -> Step:
    """uv in the base with the overlay's venv, in one container start: `before` (shell lines: the venv), a dry
    run against the base's environment (read-only) that lists what it lacks for `targets`, uv installing exactly
    that into the venv (no resolution, no dependencies), then the record's command adding what is there to the
    record. `title_before`: what `before` does, for the step's title."""
    facts = request.facts
    assert facts.uv is not None
    cache = StorePaths(str(facts.cache_dir)).download_cache("uv")
    uv = f"{HOST_MOUNT}/uv"
    binds = [writable_venv, host_bind, Bind(facts.uv, uv, is_file=True), Bind(cache, f"{HOST_MOUNT}/cache", read_only=False),
             *sources.binds]
    common = ["--cache-dir", f"{HOST_MOUNT}/cache", *sources.uv_args()]
    plan_file, added_file = f"{HOST_MOUNT}/uv-plan.txt", f"{HOST_MOUNT}/added.txt"
    base_file, wanted_file = f"{HOST_MOUNT}/base-packages.txt", f"{HOST_MOUNT}/uv-wanted.txt"
    # --break-system-packages: a dry run only; a conda env or a distribution's Python may be marked as managed.
    dry_run = [uv, "pip", "install", "--dry-run", "--break-system-packages", "--python", probe.python, *common,
               "--constraint", f"{HOST_MOUNT}/constraints.txt", *targets]
    # Compile now: in a read-only overlay Python would recompile on every start.
    install = [uv, "pip", "install", "--python", python, "--no-deps", "--compile-bytecode", "--link-mode=copy", *common,
               "-r", added_file]
    script = before + "\n".join([
        f"{shlex.join(dry_run)} 2>{plan_file} || {{ status=$?; cat {plan_file} >&2; exit $status; }}",
        f"cat {plan_file} >&2",
        # uv lists what it would install as " + name==version" (or " + name @ url"), else says it would make no
        # changes; neither means its output is not what this reads, and the overlay would silently lack packages.
        f"sed -n 's/^ + //p' {plan_file} >{wanted_file}",
        f"[ -s {wanted_file} ] || grep -q '^Would make no changes' {plan_file} || {{ "
        f"echo {shlex.quote(UNREADABLE_DRY_RUN)} >&2; exit 3; }}",
        # One the base has at that very version lies where uv did not look (a directory on the image's
        # PYTHONPATH): the base provides it.
        f"{{ grep -vixF -f {base_file} {wanted_file} || true; }} >{added_file}",
        f"if [ -s {added_file} ]; then {shlex.join(install)}; fi",
        shlex.join(["exec", *record[1]]),
    ])
    mount_points = [f"{host}/cache", *(f"{host}{b.inside[len(HOST_MOUNT):]}" for b in sources.binds if not b.is_file)]
    bound_files = [f"{host}/uv", *(f"{host}{b.inside[len(HOST_MOUNT):]}" for b in sources.binds if b.is_file)]
    env = [*sources.credential_env("uv"), *((("SSL_CERT_FILE", sources.cert),) if sources.cert else ()),
           *((("SSL_CLIENT_CERT", sources.client_cert),) if sources.client_cert else ())]
    actions: list[Action] = [
        MakeDirs((cache,)), MakeDirs(tuple(mount_points), root=host),
        WriteFile(f"{host}/constraints.txt", "".join(c + "\n" for c in constraints), root=host),
        WriteFile(f"{host}/base-packages.txt", "".join(f"{name}=={version}\n" for name, (_, version)
                                                       in sorted(probe.installed().items())), root=host),
        *(WriteFile(path, "", root=host) for path in bound_files),  # mount points of bound files
        *record[0],
        run(["/bin/sh", "-ec", script], binds, env=env),
        # uv's lock file for the venv, world-writable by design (for shared caches); no part of the overlay.
        Remove((f"{venv}/.lock",), root=venv),
        check,
    ]
    return Step("install", f"{title_before}uv install {' '.join(targets)} (what the base lacks), then record how the overlay was made "
                           "and what it added", tuple(actions))


def _squash_step(request: BuildRequest, entry: EntryPaths, key: str, venv: str, processors: int) -> Step:
    from envbuild.sif.compression import mksquashfs_argv

    options = request.options
    partial = f"{entry.overlay}.partial-{options.build_id}"
    argv = mksquashfs_argv(venv, partial, compression=options.compression, processors=processors,
                           source_date_epoch=options.source_date_epoch, all_root=True, offset=0)
    meta = {"kind": "overlay", "key": key, "created": options.built_at, "spec": request.spec.name,
            "parent": None, "description": f"{request.spec.name}: venv overlay on {request.spec.base.describe()}"}
    return Step("squash", f"squash the venv into one file ({options.compression}, -processors {processors})",
                (Remove((entry.complete,)), MakeDirs((entry.dir,)), Run((*argv, "-no-xattrs")), Rename(partial, entry.overlay),
                 WriteFile(entry.meta, json.dumps(meta, indent=2, sort_keys=True) + "\n"),
                 WriteFile(entry.complete, f"{request.spec.name}\n")),
                # No lock here: the session holds the entry's lock around the whole plan (the flock is per
                # open file, so taking it again from this process would wait for itself).
                skip_if_exists=entry.complete, cleanup=(Remove((partial, entry.dir)),))


def plan_overlay_resolve(request: BuildRequest, probe: BaseProbe, pins: tuple[str, ...], report: str) -> tuple[str, tuple[Step, ...]]:
    """`envbuild lock` for an overlay: pip, in a fresh overlay venv on the base, reports what it would add
    for the requirements (`pip install --dry-run --report`), kept pins (`pins`, from the old lock) as
    constraints. What the base has is not re-resolved: the lock holds what the overlay installs.
    Returns the work directory and the steps; the report lands in `report` on the host."""
    spec = request.spec
    assert spec.overlay is not None and request.base.path
    return plan_resolve_in_base(request, probe, pins, report, image=request.base.path, venv_mount=spec.overlay.mount,
                                allow_torch_change=spec.overlay.allow_torch_change)


def plan_resolve_in_base(request: BuildRequest, probe: BaseProbe, pins: tuple[str, ...], report: str, *, image: str,
                         venv_mount: str | None, allow_torch_change: bool = False) -> tuple[str, tuple[Step, ...]]:
    """What pip, run in `image` (a .sif or a base's tree, read-only) by the base's Python, would install for the
    spec's requirements over what the base holds: the base's torch family and `pins` (the old lock's) as
    constraints. With `venv_mount`, in a scratch venv over the base's Python there (an overlay, python.target:
    venv-over-base); without, by the base's Python itself (python.target: base). Returns the work directory and
    the steps; pip's report lands in `report` on the host."""
    spec, facts = request.spec, request.facts
    work = StorePaths(str(facts.cache_dir)).work(f"lock-{spec.name}-{request.options.build_id}")
    venv, host = f"{work}/venv", f"{work}/host"
    host_bind = Bind(host, HOST_MOUNT, read_only=False)
    writable_venv = Bind(venv, venv_mount, read_only=False) if venv_mount else None

    def run(argv: list[str], binds: list[Bind], env: list[tuple[str, str]] | None = None) -> Run:
        return sandbox_exec(request, image, in_base(probe, argv), writable=False, binds=binds, env=env)

    constraints = (*torch_constraints(probe, allowed=allow_torch_change), *pins)
    sources = PackageSources.from_request(request)
    report_options = ("--dry-run", "--quiet", "--report", f"{HOST_MOUNT}/report.json")
    if writable_venv and venv_mount:
        first = Step("venv", f"make a scratch venv at {venv_mount} with the base's {probe.python}", (
            Remove((work,)), MakeDirs((venv, host)),
            run([probe.python, "-m", "venv", "--system-site-packages", "--without-pip", venv_mount], [writable_venv]),
            run([f"{venv_mount}/bin/python", "-c", BASE_PTH_SCRIPT, *probe.site_dirs], [writable_venv]),
        ))
        resolve = _install_step(request, tuple(spec.python.requirements()), constraints, sources, run, writable_venv,
                                host, host_bind, f"{venv_mount}/bin/python", pip_options=("install", *report_options),
                                title="resolve with pip in the base: what the venv over it would add")
    else:
        first = Step("work", "make the resolution's work directory", (Remove((work,)), MakeDirs((host,))))
        # --no-user: the base's tree is read-only here, and pip would otherwise plan a --user install (refused in a
        # base venv); PIP_BREAK_SYSTEM_PACKAGES: a distribution's Python (PEP 668) is where the build installs.
        resolve = _install_step(request, tuple(spec.python.requirements()), constraints, sources, run, None, host,
                                host_bind, probe.python, pip_options=("install", "--no-user", *report_options),
                                title=f"resolve with pip in the base: what its Python {probe.python} would add",
                                env=(("PIP_BREAK_SYSTEM_PACKAGES", "1"),))
    collect = Step("report", "keep pip's report", (Rename(f"{host}/report.json", report, src_root=host), Remove((work,))))
    return work, (first, resolve, collect)
