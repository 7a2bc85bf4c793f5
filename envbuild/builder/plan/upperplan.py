"""Pure planner of a `--layered` build without a sandbox: the user layer in a directory over the env layer.

A `--layered` +1 build squashes only the difference, so what was left of its time was mostly the sandbox
around that difference (reference spec + tabulate; docs/reports/performance.md): hard-linking the env
layer's 46,000 paths into a sandbox, removing them again, and the tests waiting for both. Here the user
layer's few files (environment script, labels, build record, files[]) are written to an empty directory
instead, which lies over the env layer wherever the tree is used:
  tests, record   `apptainer exec --overlay UPPER:ro ENV_LAYER` (a directory overlay: about as quick as
                  an exec without), the record's files written through a bind of UPPER/.envbuild
  metadata        `apptainer inspect` of both layers' /.singularity.d merged (envbuild.sif.writer)
  difference      the env layer's tree with UPPER's files over it (envbuild.sif.manifest.TreeView)
  fallback        a full squash first merges the two into a sandbox (envbuild.sif.layeredwriter)

Only where the sandbox would hold nothing else and the runtime surely mounts a directory overlay:
  - a stored image to layer over (`request.squash_parent`): only then is the image a difference;
  - no `post` commands: they write anywhere in the tree, which needs the writable sandbox;
  - no SOURCE_DATE_EPOCH: clamping times rewrites the whole tree's inodes, so that build copies it;
  - building as root. Layering itself needs a runtime that mounts SIF overlay partitions, which
    unprivileged apptainer does not (envbuild.sif.layeredwriter); a setuid install would mount a
    directory overlay too, but which install this is cannot be known without trying, so a build as
    another user keeps the sandbox: the same image, later.
"""

from __future__ import annotations

from dataclasses import replace

from envbuild.builder.plan.actions import CopyTree, MakeDirs, Remove, Run, Step
from envbuild.builder.plan.imageplan import (
    configure_step,
    env_step,
    output_partial,
    output_step,
    squash_step,
    start_tests,
    wrappers_step,
)
from envbuild.builder.plan.install import PackageSources
from envbuild.builder.plan.layers import choose_installer, plan_layers
from envbuild.builder.plan.plandata import BuildPlan, BuildRequest
from envbuild.builder.plan.pythontarget import with_target_python
from envbuild.builder.plan.record import RECORD_ENVIRONMENTS_SCRIPT
from envbuild.builder.plan.sandbox import RECORD_DIR, Bind, sandbox_exec
from envbuild.builder.plan.squashplan import NICE
from envbuild.envspec.specmodel import VENV_PREFIX
from envbuild.store.layout import StorePaths


def user_layer_over_env(request: BuildRequest) -> bool:
    """Whether this build writes its user layer to a directory over the env layer (see above)."""
    return (bool(request.squash_parent) and not request.spec.post and request.options.source_date_epoch is None
            and request.options.as_root)


def beside_tests(run: Run, tests: tuple[str, ...]) -> Run:
    """`run` at nice 10 when the tests run beside it: they are the build's longest path (the reference spec's
    import test, slower beside the record at equal priority than niced). What runs niced after the record
    (metadata, the layered write) still ends first."""
    return replace(run, argv=(*NICE, *run.argv)) if tests else run


def plan_upper_build(request: BuildRequest) -> BuildPlan:
    """env layer (cached) -> user layer in an empty directory -> record and tests over both -> the
    difference as an overlay partition over the stored image -> copy to the output."""
    if not user_layer_over_env(request):
        raise ValueError("plan_upper_build: this build needs a sandbox (envbuild.builder.plan.imageplan.plan_build)")
    spec, facts = request.spec, request.facts
    store = StorePaths(str(facts.cache_dir))
    layers = plan_layers(request)
    work = store.work(f"{spec.name}-{request.options.build_id}")
    upper, tests_view = f"{work}/upper", f"{work}/upper-for-tests"
    installer = choose_installer(spec, facts)
    sources = PackageSources.from_request(request)
    env_rootfs = store.env(layers.env_entry).rootfs

    configure = configure_step(request, upper, installer, layers, lower=env_rootfs)
    steps = [
        env_step(request, layers, store, installer, sources),
        Step("configure", f"{configure.title}, in a directory over the env layer (no sandbox to copy)",
             (Remove((work,)), MakeDirs((work, upper)), *configure.actions)),
        Step("record", "record every Python environment's packages", (
            # The tests see the user layer through hard links made before the record replaces two of its
            # files: a lower layer changed under a mounted overlay is undefined behaviour (kernel
            # Documentation/filesystems/overlayfs.rst, "Changes to underlying filesystems"), and waiting
            # for the record would put it on the tests' path, the longest of the build.
            *((CopyTree(upper, tests_view, hardlink=True),) if spec.tests else ()),
            *start_tests(request, env_rootfs, spec.tests, overlay=tests_view),
            beside_tests(sandbox_exec(request, env_rootfs, with_target_python(spec.python, [f"{VENV_PREFIX}/bin/python", "-c",
                                                                                       RECORD_ENVIRONMENTS_SCRIPT]),
                                      writable=False, binds=[Bind(f"{upper}{RECORD_DIR}", RECORD_DIR, read_only=False)],
                                      overlay=upper), spec.tests))),
    ]
    entry = store.image(layers.image_entry)
    steps.append(squash_step(request, entry, layers, env_rootfs, work, tests=spec.tests,
                             output_partial=output_partial(request), upper=upper))
    steps.append(output_step(request, entry.image, f"put the image at {request.options.output}", made_ahead=True))
    steps.append(wrappers_step(request, f"{env_rootfs}{VENV_PREFIX}/bin", root=env_rootfs))
    if not request.options.keep_work:
        steps.append(Step("clean", "remove the build's work directory", (Remove((work,)),)))
    return BuildPlan(
        name=spec.name, output=request.options.output, work_dir=work, sandbox=upper, installer=installer,
        requirements=tuple(spec.python.requirements()), package_sources=sources.shown, layers=layers,
        store_image=entry.image, steps=tuple(steps),
    )
