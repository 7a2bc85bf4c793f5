"""The spec's `post` commands (an imported file's %post and RUN lines) run in the sandbox with the build's
network settings: the package sources envbuild's own installs use (the host's pip configuration: indexes,
find-links, trusted hosts, certificates; the variant's PyTorch index where the spec has one) and the host's
proxy variables. A file's own `pip install` then reaches what the build's installs reach, behind a site's
proxy or mirror with its own CA as well.

The settings are handed to each command when it runs (as the runtime's environment variables, local paths
bound under HOST_MOUNT for that run only): nothing of them is written into the image, its labels, its
environment script or its build record, and credentials in them are shown redacted wherever a plan is."""

from __future__ import annotations

from envbuild.builder.plan.actions import Action, MakeDirs, Remove, Step, Touch
from envbuild.builder.plan.install import PackageSources
from envbuild.builder.plan.plandata import BuildRequest
from envbuild.builder.plan.sandbox import HOST_MOUNT, Bind, sandbox_exec

# Certificate variables that point tools other than pip at the build's CA bundle: uv and Python's ssl
# (SSL_CERT_FILE), requests and what is built on it (REQUESTS_CA_BUNDLE).
CA_BUNDLE_VARIABLES = ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE")


def pip_environment(sources: PackageSources) -> list[tuple[str, str]]:
    """`sources` (as seen inside the sandbox) as pip's own variables, which override the image's pip.conf
    key by key as the host's configuration does on the host; locations with credentials go the same way
    (an environment is visible to its owner only, a command line to every user)."""
    env: list[tuple[str, str]] = []
    if sources.no_index:
        env.append(("PIP_NO_INDEX", "1"))
    if sources.index_url:
        env.append(("PIP_INDEX_URL", sources.index_url))
    for variable, values in (("PIP_EXTRA_INDEX_URL", sources.extra_index_urls), ("PIP_FIND_LINKS", sources.find_links),
                             ("PIP_TRUSTED_HOST", sources.trusted_hosts)):
        if values:
            env.append((variable, " ".join(values)))
    if sources.cert:
        env += [("PIP_CERT", sources.cert), *((variable, sources.cert) for variable in CA_BUNDLE_VARIABLES)]
    if sources.client_cert:
        env.append(("PIP_CLIENT_CERT", sources.client_cert))
    return env


def post_network(request: BuildRequest) -> tuple[list[Bind], list[tuple[str, str]]]:
    """The binds and variables a post command gets: the build's package sources as inside the sandbox
    (the proxy variables come with every sandbox_exec)."""
    sources = PackageSources.from_request(request)
    return list(sources.binds), pip_environment(sources)


def post_step(request: BuildRequest, sandbox: str) -> Step | None:
    """The spec's post commands, each in its own container start, with the build's network settings; the mount
    points they needed are gone again when the step ends. None without post commands."""
    commands = request.spec.post
    if not commands:
        return None
    binds, env = post_network(request)
    actions: list[Action] = []
    mount_dirs = tuple(f"{sandbox}{b.inside}" for b in binds if not b.is_file)
    mount_files = tuple(f"{sandbox}{b.inside}" for b in binds if b.is_file)
    if binds:
        actions.append(MakeDirs((f"{sandbox}{HOST_MOUNT}", *mount_dirs), root=sandbox))
    if mount_files:
        actions.append(Touch(mount_files, root=sandbox))
    actions += [sandbox_exec(request, sandbox, ["/bin/sh", "-ec", command], writable=True, binds=binds, env=env)
                for command in commands]
    if binds:
        actions.append(Remove((f"{sandbox}{HOST_MOUNT}",), root=sandbox))
    return Step("post", f"run {len(commands)} post command(s)", tuple(actions))
