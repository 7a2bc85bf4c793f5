"""Secrets in the environment of a real build never reach anything it writes (issue 15).

One tiny build (six, a post command that dumps its environment into the image) and one `envbuild lock`
run with canary secrets where a user's secrets live: token and password variables, a pip index URL with
user:password in pip.conf and in PIP_EXTRA_INDEX_URL, uv's index variable, a netrc, APPTAINERENV_/
SINGULARITYENV_ variables (which apptainer carries past --cleanenv) and a proxy with a password. The index
is the host's own local index (its pip configuration's), served over HTTP on 127.0.0.1 behind basic auth
for the canary credentials, so the build only succeeds when the installers got them at install time.
Then every file of the image, its SIF metadata, the build log, the wrappers, the lock and its log, the
whole store (download cache included), batch scripts for the image and every command's output are
searched for every canary. The proxy's password and the index's credentials are handed to build steps on
purpose (post commands download through the proxy and from the index too); that dump leaves them out."""

from __future__ import annotations

import base64
import functools
import http.server
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from envbuild.store.layout import kind_dir
from tests.conftest import REPO, run_cli
from tests.support.canaries import canary_environment, found_in_text, found_in_tree

pytestmark = [pytest.mark.apptainer]
ENVBUILD, ENVRUN = str(REPO / "bin/envbuild"), str(REPO / "bin/envrun")

SPEC = """\
name: tiny
system: local
base: debootstrap:bookworm
python:
  packages: [six]
post:
  # The build's network settings (proxy variables, pip's sources and certificates) are handed to every build
  # step on purpose: post commands download through them too.
  - env | grep -Eiv '^([a-z_]*_proxy|pip_[a-z_]+|ssl_cert_file|requests_ca_bundle)=' | sort > /opt/build-env.txt
tests:
  - python -c "import six"
"""


def local_index_with_six() -> Path:
    """The host's local package index (a `simple` directory named by its pip configuration) that has six."""
    from envbuild.host.pip import local_path_of, read_host_pip_settings

    settings = read_host_pip_settings()
    for url in (settings.index_url, *settings.extra_index_urls):
        local = local_path_of(url) if url else None
        if local and (Path(local) / "six").is_dir():
            return Path(local)
    pytest.fail(f"no local index with six in the host's pip configuration ({', '.join(settings.sources)}); "
                "provision/ sets up file:///opt/pypi/simple", pytrace=False)


@dataclass
class AuthIndex:
    """An HTTP server for a local index that answers only requests with one of `accepted` (user:password)."""

    root: Path
    accepted: set[str]
    used: set[str] = field(default_factory=set)
    refused: int = 0

    def start(self) -> tuple[http.server.ThreadingHTTPServer, int]:
        index = self

        class Handler(http.server.SimpleHTTPRequestHandler):
            def allowed(self) -> bool:
                header = self.headers.get("Authorization", "")
                pair = base64.b64decode(header[6:]).decode() if header.startswith("Basic ") else ""
                if pair in index.accepted:
                    index.used.add(pair)
                    return True
                index.refused += 1
                self.send_response(401)
                self.send_header("WWW-Authenticate", 'Basic realm="canary"')
                self.end_headers()
                return False

            def do_GET(self) -> None:
                if self.allowed():
                    super().do_GET()

            def do_HEAD(self) -> None:
                if self.allowed():
                    super().do_HEAD()

            def log_message(self, *args: object) -> None:
                pass

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=str(self.root)))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return server, server.server_address[1]


@dataclass
class Leak:
    canaries: list[str]
    project: Path
    store: Path
    image: Path
    index: AuthIndex
    outputs: dict[str, str]  # command -> its stdout and stderr


@pytest.fixture(scope="module")
def leak(tmp_path_factory: pytest.TempPathFactory, build_cache: Path, debootstrap_base: Path) -> Iterator[Leak]:
    work = tmp_path_factory.mktemp("secrets")
    simple = local_index_with_six()
    index = AuthIndex(simple.parent, accepted=set())
    server, port = index.start()
    env, kinds = canary_environment(work, f"127.0.0.1:{port}/{simple.name}")
    canaries = list(kinds.values())
    index.accepted = {f"{kinds['confuser']}:{kinds['confpw']}", f"{kinds['envuser']}:{kinds['envpw']}"}
    store = work / "store"
    kind_dir(store, "base").mkdir(parents=True)
    entry = debootstrap_base.parent
    subprocess.run(["cp", "-al", str(entry), str(kind_dir(store, "base") / entry.name)], check=True)
    project = work / "project"
    project.mkdir()
    (project / "tiny.yaml").write_text(SPEC)
    image = project / "out" / "tiny.sif"
    env["ENVBUILD_CACHE_DIR"] = str(store)
    outputs: dict[str, str] = {}
    try:
        for name, argv in (
            ("build", [ENVBUILD, "build", "tiny.yaml", "-o", str(image), "--compression", "zstd"]),
            ("lock", [ENVBUILD, "lock", "tiny.yaml"]),
            ("dry-run", [ENVBUILD, "build", "tiny.yaml", "-o", str(image), "--dry-run"]),
            ("sbatch", [ENVRUN, "sbatch", "--system", "local", "--image", str(image), "--account", "p1", "--dry-run",
                        "--", "python", "train.py"]),
            ("envrun", [ENVRUN, "--system", "local", "--image", str(image), "--dry-run", "srun", "torchrun", "train.py"]),
        ):
            result = run_cli(argv, env_extra=env, cwd=project, timeout=900)
            assert result.returncode == 0, f"{name}: {result.stdout}{result.stderr[-6000:]}"
            outputs[name] = result.stdout + result.stderr
        yield Leak(canaries, project, store, image, index, outputs)
    finally:
        server.shutdown()


def sif_partition(image: Path, into: Path) -> Path:
    """The image's root file system, unpacked with unsquashfs from the SIF's partition."""
    from envbuild.sif.reader import read_sif_layout

    offset = read_sif_layout(image).primary_partition().offset
    subprocess.run(["unsquashfs", "-q", "-n", "-d", str(into), "-o", str(offset), str(image)], check=True,
                   stdout=subprocess.DEVNULL)
    return into


def test_the_installers_got_the_credentials_at_install_time(leak: Leak) -> None:
    # Six is on no other source of this build: every request carried pip.conf's or PIP_EXTRA_INDEX_URL's user.
    assert leak.index.used, "the index was never asked with credentials"
    assert leak.index.used <= leak.index.accepted


def test_no_canary_in_any_file_of_the_image(leak: Leak, tmp_path: Path) -> None:
    root = sif_partition(leak.image, tmp_path / "root")
    dump = (root / "opt/build-env.txt").read_text()
    assert "PATH=" in dump, "the post command saw the build environment"
    files = sum(1 for p in root.rglob("*") if p.is_file() and not p.is_symlink())
    assert files > 1000, files
    assert found_in_tree(root, leak.canaries) == {}
    assert (root / ".envbuild/build.json").is_file() and (root / ".envbuild/spec.yaml").is_file()


def test_no_canary_in_the_sif_metadata_labels_and_definition(leak: Leak) -> None:
    from envbuild.sif.reader import read_object, read_sif_layout

    layout = read_sif_layout(leak.image)
    objects = [o for o in layout.objects if o.data_type != "partition"]
    assert {o.data_type for o in objects} >= {"deffile", "generic-json"}
    for obj in objects:
        assert found_in_text(read_object(layout, obj).decode("utf-8", "replace"), leak.canaries) == [], obj
    labels = subprocess.run(["apptainer", "inspect", "--labels", str(leak.image)], capture_output=True, text=True, check=True)
    assert "org.envbuild.spec-name" in labels.stdout and found_in_text(labels.stdout, leak.canaries) == []


def test_no_canary_in_the_log_wrappers_lock_or_any_output(leak: Leak) -> None:
    out = leak.image.parent
    log = out / "tiny.sif.build.log"
    assert "127.0.0.1" in log.read_text(), "the log names the index (redacted)"
    assert (out / "bin/python").is_file() and (leak.project / "tiny.lock").is_file()
    assert found_in_tree(out, leak.canaries) == {}  # log, wrappers and the image file's own bytes
    assert found_in_tree(leak.project / "tiny.lock", leak.canaries) == {}
    for name, text in leak.outputs.items():
        assert found_in_text(text, leak.canaries) == [], name
    assert "#SBATCH" in leak.outputs["sbatch"] and "***@127.0.0.1" in leak.outputs["dry-run"]


def test_no_canary_in_the_store(leak: Leak) -> None:
    """Layers, records, logs and the download caches: the store is shared within a project."""
    kinds = {p.name for p in leak.store.iterdir()}
    assert {"envs", "images", "logs", "uv"} <= kinds, kinds
    assert found_in_tree(leak.store, leak.canaries) == {}
