"""Pure build planner: (validated spec, recipe, host facts) -> the exact steps of a build.

The method is cotainr's, which needs neither fakeroot nor definition-file %post (neither works on
LUMI or on kernels without CAP_SYS_RESOURCE): base root filesystem -> writable sandbox directory ->
`apptainer exec --writable` to install -> `apptainer build image.sif sandbox/`.
Nothing here touches the filesystem or runs a program; `envbuild.builder.execute.executor` does that.
"""

from __future__ import annotations

import json
from pathlib import PurePosixPath

from envbuild.builder.plan.actions import (
    Action,
    CheckLinksInside,
    CheckTorchFamily,
    ClampTimes,
    CopyFile,
    CopyTree,
    GuardTree,
    JoinBeside,
    MakeDirs,
    MergeJson,
    RecordDigest,
    Remove,
    Rename,
    Run,
    StartBeside,
    Step,
    WriteFile,
    WriteRunWrappers,
)
from envbuild.builder.plan.install import BASE_SYS_PATH, PackageSources, install_actions, venv_actions
from envbuild.builder.plan.layers import base_cache_key, choose_installer, plan_layers
from envbuild.builder.plan.plandata import BasePlan, BuildPlan, BuildRequest, Layers
from envbuild.builder.plan.postcommands import post_step
from envbuild.builder.plan.pythontarget import installs_into_base, with_target_python
from envbuild.builder.plan.record import (
    BASE_PACKAGES,
    FREEZE_ADDED_TO_FILE_SCRIPT,
    FREEZE_TO_FILE_SCRIPT,
    RECORD_ENVIRONMENTS_SCRIPT,
    build_record,
    env_script,
    image_labels,
)
from envbuild.builder.plan.sandbox import ENV_SCRIPT, HOST_MOUNT, LABELS_FILE, RECORD_DIR, RUNTIME_WRITES, sandbox_exec
from envbuild.envspec.specmodel import VENV_PREFIX
from envbuild.recipes.ops import system_argument
from envbuild.store.layout import EntryPaths, StorePaths

# Always in a debootstrap base: a Python that can make venvs, and CA certificates for HTTPS.
DEBOOTSTRAP_ALWAYS = ("python3", "python3-venv", "ca-certificates")
# A dpkg configuration file in a debootstrap tree while it is made (see plan_base).
DPKG_UNSAFE_IO = "/etc/dpkg/dpkg.cfg.d/envbuild-unsafe-io"
# Directories envbuild makes inside an image: readable by every user of the image, whatever the builder's umask.
IMAGE_DIR_MODE = 0o755


def plan_build(request: BuildRequest) -> BuildPlan:
    """The build after the base is in the store: env layer (cached) -> sandbox -> user layer -> image
    in the store -> copy to the output."""
    spec, facts = request.spec, request.facts
    store = StorePaths(str(facts.cache_dir))
    layers = plan_layers(request)
    work = store.work(f"{spec.name}-{request.options.build_id}")
    sandbox = f"{work}/sandbox"
    installer = choose_installer(spec, facts)
    requirements = tuple(spec.python.requirements())
    sources = PackageSources.from_request(request)

    steps: list[Step] = [env_step(request, layers, store, installer, sources)]
    env_rootfs = store.env(layers.env_entry).rootfs
    # The user layer only adds or atomically replaces files (configure, record), so the sandbox can
    # share the env layer's files by hard links, which makes this copy instant. `post` commands may
    # write files in place, and clamping times for SOURCE_DATE_EPOCH changes inodes: a real copy then.
    shared = not spec.post and request.options.source_date_epoch is None
    steps.append(Step("sandbox", "hard-link the env layer into a fresh sandbox" if shared else "copy the env layer into a fresh sandbox",
                      (Remove((work,)), MakeDirs((work,)), CopyTree(env_rootfs, sandbox, hardlink=shared))))
    steps.append(configure_step(request, sandbox, installer, layers))
    post = post_step(request, sandbox)
    if post:
        steps.append(post)
    steps.append(
        Step("record", "record every Python environment's packages",
             (*start_tests(request, sandbox, spec.tests),
              sandbox_exec(request, sandbox, with_target_python(spec.python, [f"{VENV_PREFIX}/bin/python", "-c",
                                                                              RECORD_ENVIRONMENTS_SCRIPT]), writable=True),
              Remove((f"{sandbox}{HOST_MOUNT}",), root=sandbox)))
    )
    store_image = store.image(layers.image_entry).image
    steps += image_steps(request, store.image(layers.image_entry), layers, sandbox, work, tests=spec.tests)
    steps.append(wrappers_step(request, f"{sandbox}{VENV_PREFIX}/bin", root=sandbox))
    if not request.options.keep_work:
        steps.append(Step("clean", "remove the build sandbox", (Remove((work,)),)))
    return BuildPlan(
        name=spec.name, output=request.options.output, work_dir=work, sandbox=sandbox, installer=installer,
        requirements=requirements, package_sources=sources.shown, layers=layers, store_image=store_image,
        steps=tuple(steps),
    )


def image_steps(request: BuildRequest, entry: EntryPaths, layers: Layers, sandbox: str, work: str,
                tests: tuple[str, ...] = ()) -> list[Step]:
    """The image into the store, then to the output. The output's copy is made from the new image while the
    tests still run (a `--layered` image is written long before its tests end, and the copy of its 390 MB
    was on the build's path after them); the output step then only renames it into place once the image
    entry is complete."""
    return [squash_step(request, entry, layers, sandbox, work, tests=tests, output_partial=output_partial(request)),
            output_step(request, entry.image, f"put the image at {request.options.output}", made_ahead=True)]


def squash_step(request: BuildRequest, entry: EntryPaths, layers: Layers, sandbox: str, work: str,
                tests: tuple[str, ...] = (), output_partial: str | None = None, upper: str | None = None) -> Step:
    """The finished sandbox squashed into the image entry of the store while the spec's `tests` (started by
    start_tests in the record step) run beside it; both only read the tree (envbuild.builder.execute.beside). The image
    entry is complete only when they passed. With `output_partial`, the new image is also copied there before
    the tests are waited for."""
    import sys

    from envbuild.builder.plan.squashplan import squash_actions, squash_with_manifest

    options, facts = request.options, request.facts
    partial = f"{entry.image}.partial-{options.build_id}"
    squash = squash_actions(sandbox, partial, compression=options.compression, source_date_epoch=options.source_date_epoch,
                            runtime_path=facts.runtime.path, work_dir=work, all_root=not options.as_root,
                            python=facts.python or None, processors=facts.cpus, upper=upper)
    # The tree manifest lets a later --layered build squash only its difference (envbuild.sif.layeredwriter).
    parent = StorePaths(str(facts.cache_dir)).image(request.squash_parent).dir if request.squash_parent else None
    squash = squash_with_manifest(squash, sandbox=sandbox, partial=partial, work=work, entry_dir=entry.dir,
                                  compression=options.compression, all_root=not options.as_root,
                                  source_date_epoch=options.source_date_epoch, processors=facts.cpus,
                                  runtime=facts.runtime.path, python=facts.python or sys.executable, parent_dir=parent,
                                  upper=upper)
    return Step("squash", f"write the image ({options.compression}) into the store"
                          + (f" as a layer over image {request.squash_parent}" if parent else ""),
                (Remove((entry.complete,)), MakeDirs((entry.dir,)),
                 *((ClampTimes(sandbox, options.source_date_epoch),) if options.source_date_epoch is not None else ()),
                 *_tests_beside(request, sandbox, tests, squash, partial, output_partial), Rename(partial, entry.image),
                 WriteFile(entry.meta, _meta_json(request, "image", layers.image_key, layers.env_entry)),
                 WriteFile(entry.complete, f"{request.spec.name}\n")),
                # The whole entry: it is not complete (a complete one is reused, never squashed again).
                cleanup=(Remove((partial, entry.dir, *((output_partial,) if output_partial else ()))),))


def start_tests(request: BuildRequest, sandbox: str, tests: tuple[str, ...], overlay: str | None = None) -> tuple[Action, ...]:
    """The spec's tests started in the background once the tree is finished except for the build record: from
    the record step on (which only adds the record's files) they run beside it and the squash, and the squash
    step waits for them (envbuild.builder.execute.beside)."""
    if not tests:
        return ()
    runs = tuple(sandbox_exec(request, sandbox, ["/bin/sh", "-ec", cmd], writable=False, overlay=overlay) for cmd in tests)
    return (StartBeside("test", f"run {len(tests)} test(s) inside the image", runs),)


def _tests_beside(request: BuildRequest, sandbox: str, tests: tuple[str, ...], squash: tuple[Action, ...],
                  partial: str, output_partial: str | None) -> tuple[Action, ...]:
    """The squash's actions (and the output's copy of `partial`), then the wait for the tests started before."""
    squash = (*squash, *((CopyFile(partial, output_partial, ahead=True, private_sources=private_sources(request)),)
                         if output_partial else ()))
    return (*squash, JoinBeside("test")) if tests else squash


def output_partial(request: BuildRequest) -> str:
    """Where the output's copy is written before it is renamed into place (a killed build's is removed by the next)."""
    return f"{request.options.output}.partial-{request.options.build_id}"


def output_step(request: BuildRequest, store_image: str, title: str, *, made_ahead: bool = False) -> Step:
    """Copy the image from the store to the output path, which changes at once from old to new. `made_ahead`:
    the squash step usually copied it already (image_steps); the copy here is for when it had no room."""
    output, partial = request.options.output, output_partial(request)
    copy = CopyFile(store_image, partial, unless_exists=made_ahead, private_sources=private_sources(request))
    return Step("output", title, (copy, Rename(partial, output)), cleanup=(Remove((partial,)),))


def private_sources(request: BuildRequest) -> tuple[tuple[str, int], ...]:
    """The files[] sources of the image whose readers are left to the source's bits (see CopyFile): the output
    copy gives no permission to those who cannot read them on this host."""
    spec, directory = request.source.spec, request.source.directory
    return tuple((item.host_source(directory), item.readers_left_to_source) for item in spec.files
                 if item.readers_left_to_source)


# Wrapped where the packages go into the base's own Python, whose bin/ holds the distribution's commands too.
BASE_TARGET_COMMANDS = ("python", "python3", "pip", "torchrun")


def wrappers_step(request: BuildRequest, venv_bin: str, *, root: str | None = None) -> Step:
    """`root`: the tree `venv_bin` lies in (read inside it); None where `venv_bin` is an image file. Without a
    venv (python.target: base) the base's Python commands are wrapped instead."""
    out_dir = str(PurePosixPath(request.options.output).parent)
    into_base = installs_into_base(request.spec.python)
    extra = BASE_TARGET_COMMANDS if into_base else ()
    return Step("wrappers", f"write run wrappers to {out_dir}/bin",
                (WriteRunWrappers(None if into_base else venv_bin, f"{out_dir}/bin", request.options.output,
                                  system_argument(request.recipe), request.facts.runtime.name, venv_root=root,
                                  extra_commands=extra),))


# --- base -----------------------------------------------------------------------------------------


def plan_base(request: BuildRequest) -> BasePlan:
    """Steps that put the base root filesystem into the store once and record its content digest."""
    spec, facts = request.spec, request.facts
    base = spec.base
    name = base_cache_key(base, facts, request.base.fingerprint)
    entry = StorePaths(str(facts.cache_dir)).base(name)
    partial, rootfs, marker, digest_file = f"{entry.rootfs}.partial", entry.rootfs, entry.complete, entry.digest
    if base.kind == "debootstrap":
        include = ",".join(dict.fromkeys((*DEBOOTSTRAP_ALWAYS, *base.include)))
        tree = f"{entry.dir}/debootstrap.partial"
        argv = ["debootstrap", "--variant=minbase", f"--include={include}", base.ref, tree]
        mirror = base.mirror or facts.debian_mirror
        if mirror:
            argv.append(mirror)
        unsafe_io = f"{tree}{DPKG_UNSAFE_IO}"
        fetch: tuple[Action, ...] = (
            Remove((tree,)),
            # dpkg in the chroot reads this before it unpacks anything: no fsync per file (dpkg(1),
            # --force-unsafe-io). Unpacking is nearly half of debootstrap's time, and an fsync per small file is
            # costly on such disks; a base that does not complete is thrown away anyway.
            MakeDirs((unsafe_io.rsplit("/", 1)[0],), root=tree), WriteFile(unsafe_io, "force-unsafe-io\n", root=tree),
            Run(tuple(argv)),
            Remove((unsafe_io,), root=tree),  # not left in the image: apt there syncs as usual
            # The downloaded .debs are not part of the environment.
            Run(("find", f"{tree}/var/cache/apt/archives", "-name", "*.deb", "-delete")),
            # debootstrap writes no /etc/hosts; without one the runtime cannot bind the host's, and
            # `localhost` (torchrun --standalone's rendezvous) does not resolve inside the container.
            WriteFile(f"{tree}/etc/hosts", "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n", root=tree),
            # Through the runtime once, so the tree gets the runtime's /.singularity.d skeleton (its
            # env scripts set the default PATH); the runtime adds it only where none exists.
            Run((*sandbox_build_argv(request), partial, tree)),
            Remove((tree,)),
        )
        cleanup: tuple[Action, ...] = (Remove((partial, tree, entry.dir)),)
        title = f"debootstrap {base.ref} (cached after the first build)"
    else:
        source = request.base.path if base.kind == "localimage" else base.ref
        fetch = (Run((*sandbox_build_argv(request), partial, str(source))),)
        if base.kind == "localimage" and source and not _is_sif(source):
            fetch = (CheckLinksInside(source, RUNTIME_WRITES, f"the base directory {source}"), *fetch)
        cleanup = (Remove((partial, entry.dir)),)
        title = f"unpack base {base.describe()} (cached after the first build)"
    # A local .sif is identified by its own bytes (what `sha256sum` shows); every other base by the
    # content of the unpacked tree (docker layers arrive in no canonical form).
    digest_of = request.base.path if (base.kind == "localimage" and request.base.path and _is_sif(request.base.path)) else rootfs
    ensure = Step(
        "base", title,
        (Remove((partial, rootfs, digest_file)), MakeDirs((entry.dir,)), *fetch,
         # every later apptainer run on the tree (exec --writable, inspect) goes by host paths too
         CheckLinksInside(partial, RUNTIME_WRITES, f"the unpacked base {base.describe()}"), Rename(partial, rootfs),
         RecordDigest(digest_of, digest_file),
         WriteFile(entry.meta, _meta_json(request, "base", name, None)),
         WriteFile(marker, base.describe() + "\n")),
        skip_if_exists=marker, cleanup=cleanup, lock=("base", name),
    )
    # Entries made before digests were recorded get theirs on first use.
    digest = Step("base-digest", "record the base's content digest", (RecordDigest(digest_of, digest_file),),
                  skip_if_exists=digest_file, lock=("base", name))
    return BasePlan(entry=entry.dir, rootfs=rootfs, digest_file=digest_file, steps=(ensure, digest))


def _is_sif(path: str) -> bool:
    return path.endswith((".sif", ".simg", ".img"))


def env_step(request: BuildRequest, layers: Layers, store: StorePaths, installer: str, sources: PackageSources) -> Step:
    """The env layer: the base (or a parent env layer) plus the venv with every requirement installed."""
    entry = store.env(layers.env_entry)
    partial, rootfs = f"{entry.rootfs}.partial", entry.rootfs
    start = store.env(layers.env_parent).rootfs if layers.env_parent else store.base(layers.base_entry).rootfs
    actions: list[Action] = [Remove((partial, rootfs, entry.digest, entry.file_digests)), MakeDirs((entry.dir,))]
    snapshot = f"{entry.dir}/parent.snapshot"
    # Only the difference is installed on a parent env layer, and a new venv on the base, so the parent's
    # files are shared by hard links instead of copied (a copy of a parent's 1-2 GB, or of the base, would be a
    # large part of the build). Installers add, replace and delete files; should one ever write through a shared
    # file (two packages shipping the same file), the guard below notices and retires the parent, whose
    # content would no longer match its key: the base is then made again when next needed.
    if layers.env_parent and request.env_parent_copy:
        actions += [Rename(request.env_parent_copy[0], partial), Rename(request.env_parent_copy[1], snapshot)]
    else:
        actions.append(CopyTree(start, partial, hardlink=True, snapshot=snapshot))
    actions += venv_actions(request, partial)
    requirements = tuple(request.spec.python.requirements())
    freeze_inside = f"{HOST_MOUNT}/freeze.txt"
    freeze = f"{partial}{freeze_inside}"
    # In the base's own Python the layer's package list is what the builds added (the parent choice's input).
    freeze_argv = ((f"{VENV_PREFIX}/bin/python", "-I", "-c", FREEZE_ADDED_TO_FILE_SCRIPT, freeze_inside, BASE_PACKAGES)
                   if installs_into_base(request.spec.python) else
                   (f"{VENV_PREFIX}/bin/python", "-I", "-c", FREEZE_TO_FILE_SCRIPT, freeze_inside))
    installs = request.lock.requirements is not None or bool(requirements)
    if installs:
        actions += install_actions(request, partial, installer, requirements, sources, then=freeze_argv)
        # Before the layer is renamed complete: a mismatch leaves no env layer in the store (the cleanup
        # removes the partial tree), so the next build installs and checks again instead of reusing it.
        # The base's own Python is found only inside the container: the install step listed its sys.path.
        if installs_into_base(request.spec.python):
            actions.append(CheckTorchFamily(partial, "/", f"the base's own Python in {request.spec.name} (just "
                                                          "installed into)", sys_path_file=BASE_SYS_PATH))
        else:
            actions.append(CheckTorchFamily(partial, VENV_PREFIX, f"the Python environment of {request.spec.name} "
                                                                   f"({VENV_PREFIX}, just installed)"))
    actions.append(GuardTree(start, snapshot, store.env(layers.env_parent).complete if layers.env_parent else
                             store.base(layers.base_entry).complete))
    if not installs:
        actions += [MakeDirs((f"{partial}{HOST_MOUNT}",), root=partial),
                    sandbox_exec(request, partial, with_target_python(request.spec.python, freeze_argv), writable=True)]
    actions += [
        Rename(freeze, entry.freeze, src_root=partial),
        Remove((f"{partial}{HOST_MOUNT}",), root=partial),
        Rename(partial, rootfs),
        # The layer's record, before it is complete and under its lock: a build taking it from a store others
        # can write compares the tree with it (envbuild.builder.sessions.storetrust.take_env_layer). On a parent layer only
        # the files the install added are read (the whole 1.2 GB of the reference would be a good part of a +1 build).
        RecordDigest(rootfs, entry.digest, files_out=entry.file_digests,
                     reuse=store.env(layers.env_parent).file_digests if layers.env_parent else None),
        WriteFile(entry.meta, _meta_json(request, "env", layers.env_key, layers.env_parent or layers.base_entry,
                                                   compat=layers.env_compat, installer=installer)),
        WriteFile(entry.complete, f"{request.spec.name}\n"),
    ]
    what = (f"install the difference on top of env layer {layers.env_parent}" if layers.env_parent else
            "install with the base's Python" if installs_into_base(request.spec.python) else "create the venv and install")
    return Step("env", f"Python env layer: {what} (cached after the first build)", tuple(actions),
                skip_if_exists=entry.complete, cleanup=(Remove((partial, snapshot, entry.dir)),), lock=("env", layers.env_entry))


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


def sandbox_build_argv(request: BuildRequest) -> tuple[str, ...]:
    argv = [request.facts.runtime.path, "build", "--force", "--sandbox"]
    if not request.options.as_root:
        argv.append("--fix-perms")  # an unprivileged user must own every file to write into the sandbox
    return tuple(argv)


# --- python ---------------------------------------------------------------------------------------


# --- image configuration --------------------------------------------------------------------------


def configure_step(request: BuildRequest, sandbox: str, installer: str, layers: Layers, lower: str | None = None) -> Step:
    """`lower`: `sandbox` is a user layer's directory over that tree (envbuild.builder.plan.upperplan)."""
    spec = request.spec
    record = build_record(request, installer, layers)
    actions: list[Action] = [
        MakeDirs((f"{sandbox}/.singularity.d/env", f"{sandbox}{RECORD_DIR}"), IMAGE_DIR_MODE, root=sandbox),
        WriteFile(f"{sandbox}{ENV_SCRIPT}", env_script(spec, request.facts.envbuild_version, request.source.sha256), 0o755,
                  root=sandbox),
        MergeJson(f"{sandbox}{LABELS_FILE}", tuple(image_labels(request, installer, layers).items()),
                  base=f"{lower}{LABELS_FILE}" if lower else None, root=sandbox, base_root=lower),
        WriteFile(f"{sandbox}{RECORD_DIR}/spec.yaml", request.source.text, root=sandbox),
        WriteFile(f"{sandbox}{RECORD_DIR}/build.json", json.dumps(record, indent=2, sort_keys=True) + "\n", root=sandbox),
    ]
    if request.lock.text:
        actions.append(WriteFile(f"{sandbox}{RECORD_DIR}/spec.lock", request.lock.text, root=sandbox))
    actions += file_steps(request, sandbox)
    return Step("configure", "write environment script, labels and build record", tuple(actions))


def file_steps(request: BuildRequest, sandbox: str) -> list[Action]:
    """The spec's files[] copied into the sandbox, inside it whatever links its base has: `src` as the spec
    loader checked it (envbuild.envspec.specmodel.FileCopy.host_source), `dest` normalised there, the permission bits
    as written (`mode`) or the source's, never widened."""
    actions: list[Action] = []
    for item in request.spec.files:
        dest = f"{sandbox}{item.dest}"
        actions.append(MakeDirs((str(PurePosixPath(dest).parent),), IMAGE_DIR_MODE, root=sandbox))
        actions.append(CopyFile(item.host_source(request.source.directory), dest, int(item.mode, 8) if item.mode else None,
                                dest_root=sandbox))
    return actions


# --- running inside the sandbox -------------------------------------------------------------------


