"""Images made to hurt whoever lists them (issue 28, "Hostile images"): a squashfs whose directories lead
back to its root (made by mksquashfs, then its listing rewritten: no tool makes one), symlink loops and a
symlink bomb, deep and wide trees, a sandbox whose links point at the host or a FIFO, a bind mount of a
sandbox inside itself; and labels, package names and versions holding terminal escapes. Each is listed in
well under a second with bounded memory and a clear note or error; text output shows escapes, JSON keeps
the data exact."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from envbuild.inventory.diff import diff_images, render_diff
from envbuild.inventory.image import read_inventory
from envbuild.inventory.imagefacts import read_image_facts
from envbuild.inventory.inspect_report import render_inspect
from envbuild.inventory.listing import ImageResult, package_rows, render_matrix, render_table
from envbuild.inventory.pyenvs import take_inventory
from envbuild.inventory.squashfs import Squashfs
from envbuild.inventory.trees import DirectoryTree
from envbuild.inventory.walkguard import WalkGuard
from envbuild.shared.errors import ImageFormatError
from envbuild.shared.terminaltext import printable, printable_lines
from tests.conftest import REPO
from tests.support.cputime import cpu_seconds
from tests.support.inventory_layout import dist_info

ENVBUILD = str(REPO / "bin" / "envbuild")
T = TypeVar("T")
# mksquashfs comes with apptainer from provision/install.sh: marked so, a missing tool fails the test (never a
# silent skip in CI; ENVBUILD_ALLOW_SKIP=1 skips on a laptop).
needs_mksquashfs = pytest.mark.apptainer

LOOP_NAMES = ("a", "b", "c", "d", "e")  # five: the 2 GB case
EVIL_NAME = "evil\x1b[2J\rpkg"
EVIL_VERSION = "1.0\x1b[31m"
EVIL_LABEL = ("team\x1b]0;owned\x07", "clear\x1b[2J\rscreen")


# -- building hostile trees ---------------------------------------------------------------------


def lay_out_hostile(root: Path) -> None:
    """A root with directories to be turned into loops, symlinks back to / and .., a link to itself, a
    symlink bomb as the runscript, a venv whose one package has escapes in its name and version, and
    escapes in a label."""
    for name in LOOP_NAMES:
        (root / name).mkdir(parents=True)
    os.symlink("/", root / "loop")
    os.symlink("..", root / "up")
    os.symlink("self", root / "self")
    # b0 -> b1/b1/b1/b1, b1 -> b2/b2/b2/b2, ... : 4^12 lookups for a reader that counts hops per branch.
    for level in range(12):
        os.symlink("/".join([f"b{level + 1}"] * 4), root / f"b{level}")
    os.symlink(".", root / "b12")
    singularity = root / ".singularity.d"
    singularity.mkdir()
    os.symlink("/b0/runscript", singularity / "runscript")
    (singularity / "labels.json").write_text(json.dumps(dict([EVIL_LABEL])))
    venv = root / "opt/venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    dist_info(venv / "lib/python3.11/site-packages", EVIL_NAME, EVIL_VERSION, set(), "/opt/venv")


def squash(root: Path, output: Path, *extra: str) -> Path:
    command = ["mksquashfs", str(root), str(output), "-noappend", "-no-xattrs", "-all-root", "-quiet",
               "-processors", "1", *extra]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    return output


def point_at_root(image: Path, names: tuple[str, ...]) -> None:
    """Rewrite the root listing of a squashfs made with -noI (metadata stored uncompressed) so that the
    directories `names` are the root inode itself: /a, /a/a, /a/a/a ... without end."""
    with Squashfs(str(image)) as fs:
        block = fs.superblock
        root_ref, root = fs.root_ref, fs.inode(fs.root_ref)
    data = bytearray(image.read_bytes())
    position = block.directory_table_start + root.start
    assert struct.unpack_from("<H", data, position)[0] & 0x8000, "make the squashfs with -noI"
    position += 2 + root.offset
    end = position + root.size - 3
    patched = []
    while position < end:
        count, inode_block, _base = struct.unpack_from("<3I", data, position)
        position += 12
        for _ in range(count + 1):
            _offset, delta, kind, length = struct.unpack_from("<HhHH", data, position)
            name = data[position + 8:position + 9 + length].decode()
            if name in names:
                assert inode_block == root_ref >> 16, "the root's inode is in another metadata block"
                struct.pack_into("<HhHH", data, position, root_ref & 0xFFFF, delta, kind, length)
                patched.append(name)
            position += 8 + length + 1
    assert sorted(patched) == sorted(names)
    image.write_bytes(bytes(data))


def hostile_squashfs(work: Path) -> Path:
    lay_out_hostile(work / "root")
    image = squash(work / "root", work / "hostile.sqsh", "-noI")
    point_at_root(image, LOOP_NAMES)
    return image


def wrap_in_sif(squashfs: Path, sif: Path) -> Path:
    """A SIF whose primary system partition is `squashfs`, made by apptainer's own SIF tool."""
    for command in (["apptainer", "sif", "new", str(sif)],
                    ["apptainer", "sif", "add", "--datatype", "4", "--partfs", "1", "--parttype", "2",
                     "--partarch", "2", str(sif), str(squashfs)]):
        result = subprocess.run(command, capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stdout + result.stderr
    return sif


# The memory bound is enforced, not read back: wait4's ru_maxrss was seen at 429 MiB for a 0.06 s run in one CI
# run on this VM (gVisor's accounting), while the same run reads 20 MiB elsewhere. A walk that blows up (2 GB at five
# loops before the fix) dies of MemoryError under this limit and fails the test by its exit status.
ADDRESS_SPACE_LIMIT = 1 << 30


def _limit_address_space() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE_LIMIT, ADDRESS_SPACE_LIMIT))


def run_measured(args: list[str], timeout: float = 30) -> tuple[subprocess.CompletedProcess[str], float, int]:
    """Run a command under a 1 GiB address-space limit; (its result, wall seconds, its peak memory in MiB as
    wait4 reports it: informative only, see ADDRESS_SPACE_LIMIT)."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        start = time.perf_counter()
        proc = subprocess.Popen(args, stdout=out, stderr=err, text=True, preexec_fn=_limit_address_space)
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() - start > timeout:
                proc.kill()
                os.wait4(proc.pid, 0)
                pytest.fail(f"{args} still running after {timeout} s")
            time.sleep(0.005)
        seconds = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return subprocess.CompletedProcess(args, proc.returncode, out.read(), err.read()), seconds, usage.ru_maxrss // 1024


def measured(action: Callable[[], T]) -> tuple[T, dict[str, float]]:
    """`action`'s result, and its cost: wall seconds (run once untraced: tracing slows Python down) and
    Python's peak allocation in MiB (run again, traced)."""
    start = time.perf_counter()
    result = action()
    seconds = time.perf_counter() - start
    tracemalloc.start()
    try:
        action()
        peak = tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()
    return result, {"seconds": seconds, "peak_mib": peak}


# -- loops --------------------------------------------------------------------------------------


@needs_mksquashfs
def test_directories_that_lead_back_to_the_root_are_listed_once(tmp_path: Path) -> None:
    image = hostile_squashfs(tmp_path)
    inventory, cost = measured(lambda: read_inventory(str(image)))
    assert [(p.name, p.version) for p in inventory.packages] == [(EVIL_NAME, EVIL_VERSION)]
    loops = sorted(p.path for p in inventory.problems if "directory loop" in p.message)
    assert loops == [f"/{name}" for name in LOOP_NAMES]
    assert all("is the directory / again" in p.message for p in inventory.problems if p.path in loops)
    assert cost["seconds"] < 0.5 and cost["peak_mib"] < 20, cost


@needs_mksquashfs
def test_a_symlink_bomb_and_link_loops_resolve_to_nothing_at_once(tmp_path: Path) -> None:
    image = hostile_squashfs(tmp_path)
    with Squashfs(str(image)) as fs:
        bomb, cost = measured(lambda: fs.lookup("/.singularity.d/runscript"))
        assert bomb is None and cost["seconds"] < 0.5, cost  # 40 links in all, then given up, as Linux does
        assert fs.lookup("/self") is None
        assert fs.lookup("/loop/loop/up/up/opt/venv/pyvenv.cfg").kind == "file"  # links inside the image
        assert fs.lookup("/opt/../../../../opt/venv/pyvenv.cfg").kind == "file"  # .. stops at the root


@pytest.mark.apptainer
def test_packages_and_inspect_on_a_hostile_sif_answer_in_under_a_second(tmp_path: Path) -> None:
    sif = wrap_in_sif(hostile_squashfs(tmp_path), tmp_path / "hostile.sif")
    assert sif.stat().st_size < 64 * 1024

    listed, seconds, peak_mib = run_measured([ENVBUILD, "packages", "--no-cache", str(sif)])  # was 24 s, 2 GB
    assert listed.returncode == 0, listed.stderr
    assert seconds < 1, (seconds, peak_mib)  # and within ADDRESS_SPACE_LIMIT, or it would have failed
    for name in LOOP_NAMES:
        assert f"/{name}: is the directory / again (a directory loop" in listed.stderr
    assert "\x1b" not in listed.stdout + listed.stderr and "\r" not in listed.stdout
    assert printable(EVIL_NAME) in listed.stdout and printable(EVIL_VERSION) in listed.stdout

    shown, seconds, peak_mib = run_measured([ENVBUILD, "inspect", "--no-cache", str(sif)])
    assert shown.returncode == 0, shown.stderr
    assert seconds < 1, (seconds, peak_mib)  # and within ADDRESS_SPACE_LIMIT, or it would have failed
    assert "\x1b" not in shown.stdout and "\r" not in shown.stdout and "\x07" not in shown.stdout
    assert f"  {printable(EVIL_LABEL[0])}: {printable(EVIL_LABEL[1])}" in shown.stdout
    assert "runscript: (none)" in shown.stdout  # the bomb resolves to nothing

    as_json, _, _ = run_measured([ENVBUILD, "packages", "--no-cache", "--json", str(sif)])
    [package] = json.loads(as_json.stdout)["packages"]
    assert (package["name"], package["version"]) == (EVIL_NAME, EVIL_VERSION)  # the data, exact


# -- wide and deep trees ------------------------------------------------------------------------


@needs_mksquashfs
def test_deep_and_wide_trees_are_walked_within_budget(tmp_path: Path) -> None:
    root = tmp_path / "root"
    deep = root.joinpath(*["d"] * 200)
    deep.mkdir(parents=True)
    (deep / "pyvenv.cfg").write_text("")  # far below where the walk looks (12 levels): not found, not followed
    wide = root / "wide"
    wide.mkdir()
    for index in range(10_000):
        (wide / f"f{index}").mkdir()
    image = squash(root, tmp_path / "wide.sqsh")
    inventory, cost = measured(lambda: read_inventory(str(image)))
    assert inventory.environments == [] and cost["seconds"] < 1 and cost["peak_mib"] < 50, cost


@needs_mksquashfs
@pytest.mark.parametrize("shape", ["conda records", "pip headers"])
def test_many_links_to_one_huge_record_stop_at_the_read_budget(tmp_path: Path, shape: str) -> None:
    """A squashfs of a few KiB whose records decompress to GiB: one big file of spaces (no blank line ends its
    header, no name in it), hard-linked where the reader reads each: conda records not named
    name-version-build (read whole, up to 32 MiB) or dist-info METADATA (read 512 KiB when 8 KiB hold no end)."""
    root = tmp_path / "root"
    prefix = root / "opt/conda"
    site = prefix / "lib/python3.11/site-packages"
    site.mkdir(parents=True)
    (prefix / "conda-meta").mkdir()
    big = tmp_path / "big"
    with big.open("wb") as handle:
        handle.write(b" " * (40 << 20 if shape == "conda records" else 600 << 10))
    for index in range(50 if shape == "conda records" else 2000):
        if shape == "conda records":
            os.link(big, prefix / f"conda-meta/record{index}.json")
        else:
            (site / f"p{index}-1.dist-info").mkdir()
            os.link(big, site / f"p{index}-1.dist-info/METADATA")
    image = squash(root, tmp_path / "bomb.sqsh")
    assert image.stat().st_size < 1 << 20
    start = cpu_seconds()
    with pytest.raises(ImageFormatError, match="reading the image's records passed 128 MiB"):
        read_inventory(str(image))
    assert cpu_seconds() - start < 2


@needs_mksquashfs
def test_thousands_of_start_scripts_stop_at_the_read_budget_of_inspect(tmp_path: Path) -> None:
    env = tmp_path / "root/.singularity.d/env"
    env.mkdir(parents=True)
    big = tmp_path / "big"
    big.write_bytes(b"#" * (1 << 20))
    for index in range(1000):  # 1 GiB of start scripts to read and print, in a few KiB
        os.link(big, env / f"{index:04d}-x.sh")
    image = squash(tmp_path / "root", tmp_path / "scripts.sqsh")
    start = cpu_seconds()
    with pytest.raises(ImageFormatError, match="reading the image's records passed 32 MiB"):
        read_image_facts(str(image))
    assert cpu_seconds() - start < 2


def test_a_walk_past_its_budget_is_an_error_naming_the_image(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "root"
    for index in range(50):
        (root / f"dir{index}").mkdir(parents=True)
    monkeypatch.setattr("envbuild.inventory.pyenvs.WalkGuard", lambda: WalkGuard(max_directories=1000, max_entries=20))
    with pytest.raises(ImageFormatError) as raised:
        read_inventory(str(root))
    assert raised.value.path == str(root)
    assert "listed 20 directory entries and was still going (at /)" in raised.value.message
    assert "--via-runtime" in raised.value.hint
    monkeypatch.setattr("envbuild.inventory.pyenvs.WalkGuard", lambda: WalkGuard(max_directories=10, max_entries=1000))
    with pytest.raises(ImageFormatError, match="listed 10 directories and was still going"):
        read_inventory(str(root))


def test_many_directories_seen_twice_are_noted_briefly() -> None:
    guard = WalkGuard()
    assert not guard.repeated("/", "root")
    assert all(guard.repeated(f"/x{index}", "root") for index in range(8))
    notes = guard.alias_notes()
    assert len(notes) == 6 and notes[-1][1] == "and 3 more paths that lead to directories already listed were skipped"
    assert not guard.repeated("/empty", None)  # an empty directory holds nothing, itself included


# -- sandbox directories ------------------------------------------------------------------------


def test_sandbox_links_resolve_inside_the_sandbox_never_on_the_host(tmp_path: Path) -> None:
    host = tmp_path / "host"
    host.mkdir()
    (host / "secret").write_text("Name: host-secret\nVersion: 1\n\n")
    root = tmp_path / "sandbox"
    site = root / "usr/lib/python3/dist-packages"
    site.mkdir(parents=True)
    (root / "secret").write_text("Name: in-sandbox\nVersion: 2\n\n")
    depth = len(site.relative_to(tmp_path).parts) + 1
    for name, target in (("absolute", str(host / "secret")), ("relative", "../" * (depth + 3) + "host/secret"),
                         ("rooted", "/secret")):
        (site / f"{name}-1.dist-info").mkdir()
        os.symlink(target, site / f"{name}-1.dist-info/METADATA")
    os.symlink(str(host), root / "hostdir")  # a directory link out of the sandbox: listed as the sandbox's /host...
    os.mkfifo(site / "fifo-1.dist-info")  # a FIFO where a dist-info directory goes
    (site / "pipe-1.dist-info").mkdir()
    os.mkfifo(site / "pipe-1.dist-info/METADATA")  # ... and as the METADATA file: never opened, never waited on
    tree = DirectoryTree(root)
    inventory, cost = measured(lambda: take_inventory(tree))
    assert [(p.name, p.version) for p in inventory.packages] == [("in-sandbox", "2")]  # only /secret, in the sandbox
    assert tree.read(str(host / "secret"), 100) is None  # the host path means a path in the sandbox: none there
    assert tree.children("/hostdir") is None  # /hostdir -> /tmp/.../host, which the sandbox does not hold
    assert sorted(p.path.split("/")[-2] for p in inventory.problems) == ["absolute-1.dist-info", "pipe-1.dist-info",
                                                                         "relative-1.dist-info"]
    assert cost["seconds"] < 0.5, cost


def test_sandbox_link_loops_and_bombs_give_nothing(tmp_path: Path) -> None:
    root = tmp_path / "sandbox"
    root.mkdir()
    os.symlink("self", root / "self")
    os.symlink("/", root / "loop")
    for level in range(12):
        os.symlink("/".join([f"b{level + 1}"] * 4), root / f"b{level}")
    os.symlink(".", root / "b12")
    (root / "file").write_text("x")
    tree = DirectoryTree(root)
    bomb, cost = measured(lambda: tree.read("/b0/file", 10))
    assert bomb is None and cost["seconds"] < 0.5, cost
    assert tree.read("/self", 10) is None
    assert tree.read("/loop/loop/loop/file", 10) == b"x"
    assert tree.children("/loop") == tree.children("/")
    assert tree.directory_key("/loop") == tree.directory_key("/")


@pytest.mark.skipif(os.geteuid() != 0, reason="bind-mounts a directory inside itself (root only)")
def test_a_sandbox_mounted_inside_itself_is_listed_once(tmp_path: Path) -> None:
    root = tmp_path / "sandbox"
    venv = root / "opt/venv"
    venv.mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("")
    dist_info(venv / "lib/python3.11/site-packages", "six", "1.16.0", set(), "/opt/venv")
    (root / "again").mkdir()
    mounted = subprocess.run(["mount", "--bind", str(root), str(root / "again")], capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot bind-mount here: {mounted.stderr.strip()}")
    try:
        inventory, cost = measured(lambda: read_inventory(str(root)))
    finally:
        subprocess.run(["umount", str(root / "again")], check=True)
    assert [(p.environment, p.name) for p in inventory.packages] == [("/opt/venv", "six")]
    assert [p.path for p in inventory.problems] == ["/again"]
    assert cost["seconds"] < 0.5, cost


# -- what is printed ----------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "shown"), [
    ("plain-name 1.0", "plain-name 1.0"),
    ("\x1b[2J", "\\x1b[2J"),
    ("a\rb\nc\td", "a\\rb\\nc\\td"),
    ("\x00\x07\x7f", "\\x00\\x07\\x7f"),
    ("\x9b31m", "\\x9b31m"),  # C1 CSI
    ("abc\u202edcba", "abc\\u202edcba"),  # right-to-left override
    ("line\u2028sep", "line\\u2028sep"),
    ("byte\udcff", "byte\\xff"),  # a byte that was not UTF-8, kept by surrogateescape
    ("naïve – ünïcode ✓", "naïve – ünïcode ✓"),
])
def test_printable_escapes_what_steers_a_terminal(text: str, shown: str) -> None:
    assert printable(text) == shown


def test_printable_keeps_tabs_in_blocks_and_lines_in_multiline_text() -> None:
    assert printable("\tindented", keep_tabs=True) == "\tindented"
    assert printable_lines("error: \x1b[2J\n  fix: x") == "error: \\x1b[2J\n  fix: x"


def _sandbox_image(root: Path, variant: str) -> Path:
    venv = root / "opt/venv"
    venv.mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("")
    dist_info(venv / "lib/python3.11/site-packages", EVIL_NAME, EVIL_VERSION if variant == "a" else "2.0\x1b[0m", set(), "/opt/venv")
    singularity = root / ".singularity.d"
    (singularity / "env").mkdir(parents=True)
    (singularity / "labels.json").write_text(json.dumps({EVIL_LABEL[0]: EVIL_LABEL[1] + variant}))
    (singularity / "env/90-environment.sh").write_text(f"export EVIL='\x1b[2J{variant}'\n\tindented\n")
    (singularity / "runscript").write_text("#!/bin/sh\r\necho \x1b[31mred\n")
    return root


def test_inspect_diff_and_tables_show_escapes_and_json_keeps_the_data(tmp_path: Path) -> None:
    a = read_image_facts(str(_sandbox_image(tmp_path / "a", "a")))
    b = read_image_facts(str(_sandbox_image(tmp_path / "b", "b")))
    inspected = render_inspect(a)
    assert "\x1b" not in inspected and "\r" not in inspected and "\x07" not in inspected
    assert f"  {printable(EVIL_LABEL[0])}: {printable(EVIL_LABEL[1])}a" in inspected
    assert "    #!/bin/sh\\r" in inspected and "    echo \\x1b[31mred" in inspected
    assert "    \tindented" in inspected  # a script's tab is kept
    diffed = render_diff(diff_images(a, b))
    assert "\x1b" not in diffed and "\r" not in diffed
    assert f"~ {printable(EVIL_NAME)} (pip) {printable(EVIL_VERSION)} -> 2.0\\x1b[0m" in diffed
    rows = package_rows([ImageResult("a", a.inventory), ImageResult("b", b.inventory)])
    for text in (render_table(rows), render_matrix(rows, ["a", "b"])):
        assert "\x1b" not in text and "\r" not in text and printable(EVIL_NAME) in text
    assert a.labels == {EVIL_LABEL[0]: EVIL_LABEL[1] + "a"}  # the facts (and so --json) hold the data as is


def test_the_commands_print_escapes_on_a_sandbox(tmp_path: Path) -> None:
    a = _sandbox_image(tmp_path / "a", "a")
    b = _sandbox_image(tmp_path / "b", "b")
    site = a / "opt/venv/lib/python3.11/site-packages"
    (site / "no\x1b[2Jmeta-1.dist-info").mkdir()  # a problem whose path holds an escape
    for args in (["packages", str(a), str(b)], ["packages", "--matrix", str(a), str(b)], ["inspect", str(a)],
                 ["diff", str(a), str(b)]):
        result, seconds, _ = run_measured([ENVBUILD, *args, "--no-cache"])
        assert result.returncode == 0, result.stderr
        assert "\x1b" not in result.stdout + result.stderr and "\r" not in result.stdout + result.stderr, args
        assert printable(EVIL_NAME) in result.stdout or args[0] == "inspect", args
        if args[0] != "diff":  # the warning names the path, escaped
            assert "no\\x1b[2Jmeta-1.dist-info/METADATA: missing" in result.stderr, args
        assert seconds < 1, (args, seconds)
    listed, _, _ = run_measured([ENVBUILD, "packages", "--json", "--no-cache", str(a)])
    assert {(p["name"], p["version"]) for p in json.loads(listed.stdout)["packages"]} == {(EVIL_NAME, EVIL_VERSION)}
    assert any("no\x1b[2Jmeta" in p["path"] for p in json.loads(listed.stdout)["images"][0]["problems"])


def test_fifos_where_a_sandbox_has_files_never_hang_a_command(tmp_path: Path) -> None:
    root = tmp_path / "sandbox"
    for fifo in ("bin/sh", "usr/bin/env", ".singularity.d/labels.json", ".singularity.d/runscript", "opt/venv/pyvenv.cfg"):
        (root / fifo).parent.mkdir(parents=True, exist_ok=True)
        os.mkfifo(root / fifo)
    os.symlink("/nonexistent", root / "bin/busybox")
    for command in ("packages", "inspect"):
        result, seconds, _ = run_measured([ENVBUILD, command, "--no-cache", str(root)], timeout=10)
        assert result.returncode == 0 and seconds < 1, (command, seconds, result.stderr)
    assert "architecture: unknown" in result.stdout and "runscript: (none)" in result.stdout


# -- --via-runtime: what the container prints ---------------------------------------------------


def _fake_runtime(tmp_path: Path, body: str) -> str:
    """A stand-in for apptainer that ignores its arguments and runs `body` (sh)."""
    runtime = tmp_path / "apptainer"
    runtime.write_text(f"#!/bin/sh\n{body}\n")
    runtime.chmod(0o755)
    return str(runtime)


def test_a_container_that_prints_without_end_is_cut_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from envbuild.inventory import via_runtime

    monkeypatch.setattr(via_runtime, "MAX_LISTING_BYTES", 1 << 20)
    endless = _fake_runtime(tmp_path, "while :; do echo 'D /opt/a/very/long/path/that/repeats'; done")
    start = time.perf_counter()
    with pytest.raises(ImageFormatError, match="the listing printed inside the container passed 1 MiB"):
        via_runtime.read_inventory_via_runtime(str(tmp_path / "img.sif"), endless)
    assert time.perf_counter() - start < 5


def test_a_container_that_never_finishes_is_stopped_at_the_timeout(tmp_path: Path) -> None:
    from envbuild.inventory.via_runtime import read_inventory_via_runtime

    silent = _fake_runtime(tmp_path, "echo 'D /opt'; exec sleep 60")
    start = time.perf_counter()
    with pytest.raises(ImageFormatError, match="exec did not finish in 1 s"):
        read_inventory_via_runtime(str(tmp_path / "img.sif"), silent, timeout=1)
    assert time.perf_counter() - start < 5


def test_a_deep_listing_from_the_container_is_read_without_recursion(tmp_path: Path) -> None:
    from envbuild.inventory.via_runtime import parse_listing

    deep = "/" + "/".join(["d"] * 5000)
    tree = parse_listing(f"D {deep}\nF {deep}/pyvenv.cfg\nD /opt/venv/lib\nD /opt\n")
    assert tree.children("/") == {"d": "dir", "opt": "dir"} and tree.children(deep) == {"pyvenv.cfg": "file"}
    assert take_inventory(tree).environments == []  # deeper than the walk looks


def test_verify_shows_what_the_image_names_escaped() -> None:
    from envbuild.verify.imagecheck import Difference, Verification, render_verification

    result = Verification("img.sif", None, passed=[f"package {EVIL_NAME}"],
                          differences=[Difference("package", f"{EVIL_NAME} {EVIL_VERSION}, the lock says 1.0")])
    text = render_verification(result)
    assert "\x1b" not in text and "\r" not in text
    assert f"  DIFF  {printable(EVIL_NAME)} {printable(EVIL_VERSION)}, the lock says 1.0" in text
