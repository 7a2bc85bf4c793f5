"""Pure planner for specs with `conda:`: the image is built by cotainr, then finished by envbuild.

cotainr (its own CLI, `python -m cotainr build`) makes a SIF from the base image with Miniforge and the
conda env installed at /opt/cotainr/conda (the LUMI course's way of building). envbuild then opens that
SIF as a sandbox and adds what every envbuild image has: labels, the embedded spec and env file, the
build record with every environment's package list, the spec's env/files/post/tests, and squashes it
into the store, so inventory, verify, overlays and envrun treat it like any other image. The second
squash costs one unpack and one mksquashfs of the image (cotainr has no option to leave its sandbox).

Before cotainr downloads anything, the network sources it needs are checked (CheckReachable): cotainr
fetches Miniforge from GitHub (no mirror option) and conda packages from the channels, and on a machine
that cannot reach them it would otherwise fail only after retries, or hang in urlopen without a timeout.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import PurePosixPath

from envbuild.builder.plan.actions import Action, CheckReachable, MakeDirs, MergeJson, Remove, Run, Step, WriteFile
from envbuild.builder.plan.imageplan import (
    IMAGE_DIR_MODE,
    file_steps,
    image_steps,
    sandbox_build_argv,
    start_tests,
    wrappers_step,
)
from envbuild.builder.plan.layers import entry_name
from envbuild.builder.plan.plandata import BuildPlan, BuildRequest, Layers
from envbuild.builder.plan.postcommands import post_step
from envbuild.builder.plan.record import RECORD_ENVIRONMENTS_SCRIPT, build_record, env_lines, image_labels
from envbuild.builder.plan.sandbox import ENV_SCRIPT, LABELS_FILE, RECORD_DIR, sandbox_exec
from envbuild.envspec.conda import CONDA_ENV_PREFIX, CONDA_PREFIX, CondaEnv
from envbuild.store.layout import StorePaths

# cotainr 2025.7.1, pack.py: the installer comes from GitHub's "latest" release; nothing configures it.
MINIFORGE_URL = "https://github.com/conda-forge/miniforge/releases/latest/download/Miniforge3-Linux-{arch}.sh"
DEFAULT_CHANNEL_ALIAS = "https://conda.anaconda.org"
DOCKER_HUB = "registry-1.docker.io"
REACHABLE_TIMEOUT_S = 5.0
UNREACHABLE_FIX = (
    "build where these hosts answer (a login node with internet access), or through a proxy (export https_proxy=...: "
    "cotainr, conda and pip use it); for conda channels, a site mirror: export CONDA_CHANNEL_ALIAS=https://<mirror>/conda "
    "(cotainr passes the environment to conda); for a docker:// base, `apptainer pull base.sif docker://...` where the "
    "registry answers and base: localimage:base.sif; or drop conda: and list the packages under python.packages "
    "(envbuild's own venv build, which uses this host's pip configuration)"
)
CONDA_LAYOUT_VERSION = 1

# Where the record script finds Python in a cotainr image: the conda env first, then the base's own.
PYTHON_CANDIDATES = (f"{CONDA_ENV_PREFIX}/bin/python", "/usr/bin/python3", "/usr/local/bin/python3")


@dataclass(frozen=True)
class CotainrTool:
    """How cotainr is run on this machine and which version it is (for the record and the image key)."""

    argv: tuple[str, ...]  # e.g. (sys.executable, "-m", "cotainr")
    version: str


def conda_of(request: BuildRequest) -> CondaEnv:
    conda = request.spec.conda
    assert conda is not None, "plan_conda_build needs a spec with conda:"
    return conda


def cotainr_base(request: BuildRequest) -> str:
    """cotainr's --base-image: the reference for docker:// and oras://, the absolute path for a local image."""
    base = request.spec.base
    if base.kind == "localimage":
        return request.base.path or base.ref
    return base.ref


def env_file_path(request: BuildRequest) -> str:
    """The generated env file, kept next to the image: NAME.sif -> NAME.conda-env.yml."""
    output = PurePosixPath(request.options.output)
    return str(output.with_name(output.stem + ".conda-env.yml"))


def reachability_checks(request: BuildRequest, arch: str, channel_alias: str | None) -> tuple[tuple[str, str], ...]:
    """(URL, what it is for) of every network source the cotainr build needs."""
    conda = conda_of(request)
    base = request.spec.base
    checks: list[tuple[str, str]] = []
    if base.kind in ("docker", "oras"):
        ref = base.ref.split("://", 1)[1]
        first = ref.split("/", 1)[0]
        host = first if ("." in first or ":" in first) and "/" in ref else DOCKER_HUB
        checks.append((f"https://{host}/v2/", f"the base image {base.ref}"))
    if conda.dependencies or conda.pip:
        checks.append((MINIFORGE_URL.format(arch=arch), "the Miniforge installer cotainr downloads"))
    if conda.dependencies:
        alias = (channel_alias or DEFAULT_CHANNEL_ALIAS).rstrip("/")
        for channel in conda.channels or ("conda-forge",):
            if channel.startswith("file:"):
                continue
            url = channel if "://" in channel else f"{alias}/{channel}/"
            checks.append((url, f"the conda channel {channel}"))
    for url in conda.pip_part().index_urls:
        checks.append((url, "a pip index of the env's pip list"))
    return tuple(dict.fromkeys(checks))


def conda_image_key(request: BuildRequest, tool: CotainrTool) -> str:
    identity = {
        "layout": CONDA_LAYOUT_VERSION,
        "spec_sha256": request.source.sha256,
        "files": list(request.source.file_digests),
        "recipe": request.recipe_digest,
        "base": cotainr_base(request), "base_fingerprint": request.base.fingerprint,
        "cotainr": tool.version,
        "compression": request.options.compression,
        "epoch": request.options.source_date_epoch,
        "envbuild": request.facts.envbuild_version,
    }
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()


def conda_layers(request: BuildRequest, tool: CotainrTool) -> Layers:
    key = conda_image_key(request, tool)
    return Layers(base_entry="", env_entry="", env_key="", env_compat="", env_parent=None,
                  image_entry=entry_name(request.spec.name[:40], key), image_key=key)


def cotainr_command(request: BuildRequest, tool: CotainrTool, image: str) -> tuple[str, ...]:
    conda = conda_of(request)
    argv = [*tool.argv, "build", image, "--base-image", cotainr_base(request)]
    if conda.dependencies or conda.pip:
        argv += ["--conda-env", env_file_path(request)]
    if conda.accept_licenses:
        argv.append("--accept-licenses")
    return (*argv, "--no-color")


def plan_conda_build(request: BuildRequest, tool: CotainrTool, *, arch: str = "x86_64",
                     channel_alias: str | None = None) -> BuildPlan:
    spec, facts = request.spec, request.facts
    conda = conda_of(request)
    store = StorePaths(str(facts.cache_dir))
    layers = conda_layers(request, tool)
    work = store.work(f"{spec.name}-{request.options.build_id}")
    sandbox, cotainr_sif, tmp = f"{work}/sandbox", f"{work}/cotainr.sif", f"{work}/tmp"  # noqa: S108 - under the store's work dir
    has_env = bool(conda.dependencies or conda.pip)
    steps: list[Step] = []
    if has_env:  # first, so that the user has it even when the build cannot go on here
        steps.append(Step("env-file", "write the conda env file next to the image",
                          (WriteFile(env_file_path(request), conda.env_file(spec.name)),)))
    checks = reachability_checks(request, arch, channel_alias)
    if checks:
        steps.append(Step("network", f"check that the {len(checks)} network source(s) of the build answer",
                          (CheckReachable(checks, REACHABLE_TIMEOUT_S, UNREACHABLE_FIX),)))
    prepare: list[Action] = [Remove((work,)), MakeDirs((tmp,))]
    # TMPDIR: cotainr makes its sandbox in a TemporaryDirectory; in the store's work dir it is on the
    # store's file system (the image's size, not /tmp's) and removed with the work dir after a failure.
    prepare.append(Run(cotainr_command(request, tool, cotainr_sif), env=(("TMPDIR", tmp),), cwd=work))
    steps.append(Step("cotainr", "build the base image" + (" and the conda environment" if has_env else "") + " with cotainr",
                      tuple(prepare)))
    steps.append(Step("unpack", "open cotainr's image as a sandbox",
                      (Run((*sandbox_build_argv(request), sandbox, cotainr_sif)), Remove((cotainr_sif, tmp)))))
    steps.append(_configure(request, tool, layers, sandbox))
    post = post_step(request, sandbox)
    if post:
        steps.append(post)
    steps.append(Step("record", "record every Python environment's packages",
                      (*start_tests(request, sandbox, spec.tests),
                       sandbox_exec(request, sandbox, ["/bin/sh", "-c", RECORD_WITH_ANY_PYTHON, "record", RECORD_ENVIRONMENTS_SCRIPT],
                                    writable=True))))
    entry = store.image(layers.image_entry)
    steps += image_steps(request, entry, layers, sandbox, work, tests=spec.tests)
    if has_env:
        steps.append(wrappers_step(request, f"{sandbox}{CONDA_ENV_PREFIX}/bin", root=sandbox))
    if not request.options.keep_work:
        steps.append(Step("clean", "remove the build sandbox", (Remove((work,)),)))
    part = conda.pip_part()
    return BuildPlan(
        name=spec.name, output=request.options.output, work_dir=work, sandbox=sandbox,
        installer=f"cotainr {tool.version}", requirements=(*conda.dependencies, *part.requirements),
        package_sources=(*conda.channels, *part.index_urls, *part.find_links), layers=layers,
        store_image=entry.image, steps=tuple(steps),
    )


# The record script runs with the first Python the image has; an image without any gets no package lists.
RECORD_WITH_ANY_PYTHON = (
    f"for python in {' '.join(PYTHON_CANDIDATES)}; do "
    '[ -x "$python" ] && exec "$python" -I -c "$1"; done; '
    'echo "envbuild: no Python in the image: the build record lists no packages" >&2'
)


def _configure(request: BuildRequest, tool: CotainrTool, layers: Layers, sandbox: str) -> Step:
    spec = request.spec
    conda = conda_of(request)
    has_env = bool(conda.dependencies or conda.pip)
    record = build_record(request, "cotainr", layers)
    record.update({
        "installer": f"cotainr {tool.version}",
        "venv": CONDA_ENV_PREFIX if has_env else None,
        "requirements": list(conda.pip_part().requirements),
        "conda": {"prefix": CONDA_PREFIX, "env": CONDA_ENV_PREFIX if has_env else None,
                  "channels": list(conda.channels), "dependencies": list(conda.dependencies),
                  "base_image": cotainr_base(request), "command": list(cotainr_command(request, tool, "IMAGE.sif"))},
    })
    labels = dict(image_labels(request, "cotainr", layers))
    labels.pop("org.envbuild.venv", None)
    labels["org.envbuild.installer"] = f"cotainr {tool.version}"
    if has_env:
        labels["org.envbuild.conda-env"] = CONDA_ENV_PREFIX
    script = "\n".join([f"# Written by envbuild {request.facts.envbuild_version} for {spec.name}: the spec's env "
                        "(cotainr's 92-cotainr-env.sh activates the conda env).", *env_lines(spec)]) + "\n"
    actions: list[Action] = [
        MakeDirs((f"{sandbox}/.singularity.d/env", f"{sandbox}{RECORD_DIR}"), IMAGE_DIR_MODE, root=sandbox),
        WriteFile(f"{sandbox}{ENV_SCRIPT}", script, 0o755, root=sandbox),
        MergeJson(f"{sandbox}{LABELS_FILE}", tuple(labels.items()), root=sandbox),
        WriteFile(f"{sandbox}{RECORD_DIR}/spec.yaml", request.source.text, root=sandbox),
        WriteFile(f"{sandbox}{RECORD_DIR}/build.json", json.dumps(record, indent=2, sort_keys=True) + "\n", root=sandbox),
    ]
    if has_env:
        actions.append(WriteFile(f"{sandbox}{RECORD_DIR}/conda-env.yml", conda.env_file(spec.name), root=sandbox))
    actions += file_steps(request, sandbox)
    return Step("configure", "write labels, env script, spec, env file and build record", tuple(actions))

