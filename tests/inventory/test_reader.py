"""The image inventory without a container runtime: SIF and squashfs reading on committed fixture
images (tests/fixtures/inventory, made by `python -m tests.support.inventory_layout`), damaged and non-SIF
files, the environment walk, metadata parsing, the runtime listing parser, cache, reports, diff."""

from __future__ import annotations

import json
import marshal
import os
import random
import re
import shutil
import struct
from pathlib import Path

import pytest

from envbuild.inventory.diff import diff_images, diff_to_dict, render_diff
from envbuild.inventory.image import read_inventory
from envbuild.inventory.imagefacts import exported_variables, read_image_facts
from envbuild.inventory.inspect_report import inspect_to_dict, render_inspect
from envbuild.inventory.inventorycache import InventoryCache
from envbuild.inventory.listing import ImageResult, image_labels, matrix, package_rows, render_json, render_matrix, render_table
from envbuild.inventory.pkgmeta import parse_conda_meta_filename, parse_conda_meta_json, parse_core_metadata
from envbuild.inventory.pyenvs import Inventory, Package, take_inventory
from envbuild.inventory.squashfs import Squashfs
from envbuild.inventory.trees import DirectoryTree, SquashfsTree
from envbuild.inventory.via_runtime import LISTING_SCRIPT, parse_listing, runtime_command
from envbuild.shared.errors import ImageFormatError
from envbuild.sif.reader import parse_header, read_sif_layout
from tests.conftest import REPO, run_cli
from tests.support.inventory_layout import FIXTURE_COMPRESSIONS, cache_env, fixture_image, inventory_cache_entries, lay_out

ENVBUILD = str(REPO / "bin" / "envbuild")


def as_set(inventory: Inventory) -> set[tuple[str, str, str, str]]:
    return {(p.environment, p.name, p.version, p.source) for p in inventory.packages}


@pytest.fixture(scope="module")
def layout(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, set[tuple[str, str, str, str]]]:
    root = tmp_path_factory.mktemp("layout") / "a"
    return root, lay_out(root, "a")


@pytest.fixture
def cli_env(tmp_path: Path) -> dict[str, str]:
    return cache_env(tmp_path)


# -- reading the committed images ------------------------------------------------------------


@pytest.mark.parametrize("compression", FIXTURE_COMPRESSIONS)
def test_fixture_image_lists_exactly_what_was_laid_out(compression: str, layout) -> None:
    _, expected = layout
    inventory = read_inventory(str(fixture_image(compression)))
    assert as_set(inventory) == expected, "fixture out of date? run: .venv/bin/python -m tests.support.inventory_layout"
    assert [p.path.rsplit("/", 2)[-2] for p in inventory.problems] == ["broken-1.0.dist-info"]
    kinds = {e.prefix: (e.kind, e.python) for e in inventory.environments}
    assert kinds == {
        "/opt/cotainr/conda": ("conda", "3.11"), "/opt/miniconda3": ("conda", "3.12"),
        "/opt/miniconda3/envs/pytorch": ("conda", "3.10"), "/opt/venv": ("venv", "3.11"),
        "/usr": ("system", ""), "/usr/local": ("system", "3.11"),
    }


def test_sandbox_directory_gives_the_same_inventory(layout) -> None:
    root, expected = layout
    assert as_set(take_inventory(DirectoryTree(root))) == expected


def test_sif_layout_and_partition() -> None:
    layout = read_sif_layout(fixture_image("gzip"))
    assert layout.header.version == "01" and layout.header.arch == "amd64"
    part = layout.primary_partition()
    assert (part.data_type, part.fs_type, part.part_type) == ("partition", "squashfs", "primary-system")
    assert part.offset + part.size <= layout.file_size
    with Squashfs(str(fixture_image("gzip")), part.offset, part.size) as fs:
        assert fs.superblock.bytes_used <= part.size and fs.superblock.major == 4


@pytest.mark.parametrize("compression", FIXTURE_COMPRESSIONS)
def test_squashfs_reads_whole_files_and_follows_symlinks(compression: str, layout) -> None:
    root, _ = layout
    image = str(fixture_image(compression))
    part = read_sif_layout(image).primary_partition()
    with Squashfs(image, part.offset, part.size) as fs:
        assert fs.superblock.compression == compression
        big = "/opt/venv/lib/python3.11/site-packages/big_meta-1.0.dist-info/METADATA"
        inode = fs.lookup(big)
        assert inode is not None and inode.size > 256 * 1024  # spans data blocks and a fragment
        assert fs.read(inode) == (root / big.lstrip("/")).read_bytes()
        assert fs.read(inode, 10) == b"Metadata-V"
        # lib64 -> lib inside the venv
        via_link = fs.lookup("/opt/venv/lib64/python3.11/site-packages/requests-2.32.3.dist-info/METADATA")
        assert via_link is not None and fs.read(via_link).startswith(b"Metadata-Version")
        assert fs.lookup("/opt/venv/lib64", follow_last=False).kind == "symlink"
        assert fs.lookup("/no/such/file") is None
        names = [e.name for e in fs.listdir(fs.lookup("/opt/miniconda3/conda-meta"))]
        assert names == sorted(names) and "history" in names
        tree = SquashfsTree(fs)
        assert tree.read("/.envbuild/lock", 100) == b"torch==2.3.0\n"


# -- damaged and foreign files ---------------------------------------------------------------


def test_not_a_sif(tmp_path: Path) -> None:
    text = tmp_path / "notes.sif"
    text.write_text("hello, I am not an image\n" * 20)
    with pytest.raises(ImageFormatError, match="not a SIF image"):
        read_inventory(str(text))
    empty = tmp_path / "empty.sif"
    empty.write_bytes(b"")
    with pytest.raises(ImageFormatError, match=r"not a SIF image \(an empty file"):
        read_inventory(str(empty))
    with pytest.raises(ImageFormatError, match="cannot read"):
        read_inventory(str(tmp_path / "missing.sif"))


def test_header_checks() -> None:
    good = fixture_image("gzip").read_bytes()[:128]
    assert parse_header(good, "x").version == "01"
    wrong_version = good[:42] + b"02\x00" + good[45:]
    with pytest.raises(ImageFormatError, match="version '02' is not supported"):
        parse_header(wrong_version, "x")


@pytest.mark.parametrize("keep", [200, 5000, 33000, 40000, -4096, -1])
def test_truncated_images_give_a_clear_error(tmp_path: Path, keep: int) -> None:
    data = fixture_image("gzip").read_bytes()
    cut = tmp_path / "cut.sif"
    cut.write_bytes(data[:keep] if keep > 0 else data[:len(data) + keep])
    with pytest.raises(ImageFormatError) as caught:
        read_inventory(str(cut))
    assert "truncated" in caught.value.render() or "damaged" in caught.value.render()
    assert str(cut) in caught.value.message


@pytest.mark.parametrize("compression", FIXTURE_COMPRESSIONS)
def test_corrupted_squashfs_never_escapes_as_a_traceback(tmp_path: Path, compression: str) -> None:
    """Flip bytes all over the file system; every outcome is a listing or an ImageFormatError."""
    original = fixture_image(compression).read_bytes()
    part = read_sif_layout(fixture_image(compression)).primary_partition()
    rng = random.Random(4)
    damaged = tmp_path / "damaged.sif"
    outcomes = {"error": 0, "listed": 0}
    for _ in range(120):
        data = bytearray(original)
        for _ in range(rng.choice([1, 4, 32])):
            data[rng.randrange(part.offset, part.offset + part.size)] ^= 1 << rng.randrange(8)
        damaged.write_bytes(bytes(data))
        try:
            read_inventory(str(damaged))
            outcomes["listed"] += 1
        except ImageFormatError as exc:
            assert str(damaged) in exc.message and exc.hint
            outcomes["error"] += 1
    assert outcomes["error"] > 0


def test_encrypted_and_ext3_partitions_point_to_via_runtime(tmp_path: Path) -> None:
    data = bytearray(fixture_image("gzip").read_bytes())
    layout = read_sif_layout(fixture_image("gzip"))
    # find the partition descriptor and set its fs type (first int32 of `extra`, at byte 201 of the descriptor)
    index = next(i for i, o in enumerate(layout.objects) if o.data_type == "partition")
    extra = layout.header.descriptors_offset + index * 585 + 201
    for fs_type, words in ((5, "encrypted"), (2, "ext3")):
        struct.pack_into("<i", data, extra, fs_type)
        image = tmp_path / f"fs{fs_type}.sif"
        image.write_bytes(bytes(data))
        with pytest.raises(ImageFormatError, match=words) as caught:
            read_inventory(str(image))
        assert "--via-runtime" in (caught.value.hint or "")


# -- pure pieces -----------------------------------------------------------------------------


def test_core_metadata_parsing() -> None:
    head = b"Metadata-Version: 2.1\nName: torch\nVersion: 2.3.0+rocm5.7\n\nName: not-this"
    assert parse_core_metadata(head) == ("torch", "2.3.0+rocm5.7")
    assert parse_core_metadata(b"Metadata-Version: 2.1\r\nName: A\r\nVersion: 1\r\n") == ("A", "1")
    assert parse_core_metadata(b"Name: a\nSummary: x\n\nVersion: 1\n") is None  # Version only in the body
    assert parse_core_metadata(b"Name: a\nDescription: first\n  Version: 9\nVersion: 2\n") == ("a", "2")


def test_conda_meta_names() -> None:
    assert parse_conda_meta_filename("pytorch-2.3.0-py3.10_rocm5.7_0.json") == ("pytorch", "2.3.0")
    assert parse_conda_meta_filename("ca-certificates-2024.3.11-h06a4308_0.json") == ("ca-certificates", "2024.3.11")
    assert parse_conda_meta_filename("history") is None
    assert parse_conda_meta_filename("odd.json") is None
    assert parse_conda_meta_json(b'{"name": "x", "version": "1.0"}') == ("x", "1.0")
    assert parse_conda_meta_json(b"[1]") is None


def test_exported_variables() -> None:
    scripts = [
        ("99-late.sh", "export FOO=late\n"),
        ("99-base.sh", "PS1=Apptainer>\n"),  # apptainer's own: not the image's settings
        ("90-environment.sh", "#!/bin/sh\nexport FOO=bar\nexport SPACED=\"two words\"\nPLAIN=1\n"
                              "case x in *) PATH=\"/x:$PATH\" ;; esac\nexport PATH\nexport RAW=$HOME/x # comment\n"),
    ]
    assert exported_variables(scripts) == {"FOO": "late", "SPACED": "two words", "PLAIN": "1", "RAW": "$HOME/x"}


def test_runtime_listing_is_parsed_into_the_same_walk(layout) -> None:
    root, expected = layout
    # What the listing script prints for this tree, produced here with Python instead of find + sed.
    lines = []
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            host = os.path.join(dirpath, name)
            path = "/" + os.path.relpath(host, root)
            if os.path.islink(host):
                lines.append(f"L {path}")
            elif os.path.isdir(host):
                lines.append(f"D {path}")
            else:
                lines.append(f"F {path}")
            meta = None
            if name.endswith(".dist-info"):
                meta = os.path.join(host, "METADATA")
            elif name.endswith(".egg-info"):
                meta = os.path.join(host, "PKG-INFO") if os.path.isdir(host) else host
            elif path.startswith("/opt/miniconda3/conda-meta/ca_"):
                meta = host
            if meta and os.path.isfile(meta):
                lines.append(f"C {path if meta == host else path + '/' + os.path.basename(meta)}")
                head = Path(meta).read_text().split("\n\n")[0] if not meta.endswith(".json") else Path(meta).read_text()
                lines += ["|" + line for line in head.split("\n")]
                lines.append("")
    assert as_set(take_inventory(parse_listing("\n".join(lines) + "\n"))) == expected
    command = runtime_command("apptainer", "x.sif")
    assert command[:7] == ["apptainer", "exec", "--contain", "--no-home", "--no-mount", "bind-paths", "x.sif"]
    assert command[-1] == LISTING_SCRIPT and "WITH_CONDA" in LISTING_SCRIPT


def test_cache_round_trip_and_keys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    image = tmp_path / "img.sif"
    shutil.copy(fixture_image("gzip"), image)
    cache = InventoryCache()
    assert cache.load(str(image)) is None
    inventory = read_inventory(str(image))
    cache.store(str(image), inventory)
    assert cache.load(str(image)) == inventory
    os.utime(image, ns=(1, 1))  # a rewritten image has another mtime: the old entry no longer applies
    assert cache.load(str(image)) is None
    assert InventoryCache(enabled=False).load(str(image)) is None
    for entry in inventory_cache_entries({"XDG_CACHE_HOME": str(tmp_path / "xdg")}):
        entry.write_text("{broken")
    os.utime(image, ns=(2, 2))
    cache.store(str(image), inventory)
    assert cache.load(str(image)) == inventory


def test_reports() -> None:
    inv_a = Inventory(packages=[Package("/opt/venv", "torch", "2.3.0", "pip"), Package("/opt/venv", "Jinja2", "3.1", "pip"),
                                Package("/opt/conda", "pytorch", "2.3.0", "conda")])
    inv_b = Inventory(packages=[Package("/opt/venv", "torch", "2.4.0", "pip"), Package("/usr", "torch", "2.2.0", "pip")])
    results = [ImageResult("x/a.sif", inv_a, arch="x86_64"), ImageResult("bad.sif", error="not a SIF"),
               ImageResult("y/b.sif", inv_b, arch="aarch64")]
    rows = package_rows(results, re.compile("torch", re.I))
    assert [(r.image, r.package, r.version) for r in rows] == [
        ("x/a.sif", "pytorch", "2.3.0"), ("x/a.sif", "torch", "2.3.0"), ("y/b.sif", "torch", "2.4.0"), ("y/b.sif", "torch", "2.2.0")]
    table = render_table(rows)
    assert table.splitlines()[0].split() == ["IMAGE", "ARCH", "ENVIRONMENT", "PACKAGE", "VERSION", "SOURCE"]
    assert [line.split()[:2] for line in table.splitlines()[1:]] == [["x/a.sif", "x86_64"]] * 2 + [["y/b.sif", "aarch64"]] * 2
    assert render_table([]) == ""
    images = ["x/a.sif", "y/b.sif"]
    assert matrix(rows, images) == {"pytorch": {"x/a.sif": "2.3.0", "y/b.sif": "-"},
                                    "torch": {"x/a.sif": "2.3.0", "y/b.sif": "2.4.0,2.2.0"}}
    assert render_matrix(rows, images).splitlines()[0].split() == ["PACKAGE", "a.sif", "b.sif"]
    assert image_labels(["x/a.sif", "y/a.sif", "z/c.sif"]) == {"x/a.sif": "x/a.sif", "y/a.sif": "y/a.sif", "z/c.sif": "c.sif"}
    document = json.loads(render_json(results, rows, with_matrix=False))
    assert [i["error"] for i in document["images"]] == [None, "not a SIF", None]
    assert [i["architecture"] for i in document["images"]] == ["x86_64", None, "aarch64"]
    assert document["packages"][0] == {"image": "x/a.sif", "environment": "/opt/conda", "name": "pytorch",
                                       "version": "2.3.0", "source": "conda"}


def test_diff_and_inspect_facts(tmp_path: Path) -> None:
    lay_out(tmp_path / "b", "b")
    facts_a = read_image_facts(str(fixture_image("gzip")))
    facts_b = read_image_facts(str(tmp_path / "b"))
    result = diff_to_dict(diff_images(facts_a, facts_b))
    envs = {e["prefix"]: e for e in result["environments"]}
    changes = {(c["key"], c["change"], c["old"], c["new"]) for c in envs["/opt/miniconda3/envs/pytorch"]["packages"]}
    assert changes == {
        ("torch (pip)", "changed", "2.3.0+rocm5.7", "2.4.0+rocm5.7"), ("pytorch (conda)", "changed", "2.3.0", "2.4.0"),
        ("lightning (pip)", "removed", "2.2.5", None), ("accelerate (pip)", "added", None, "0.31.0"),
    }
    assert envs["/opt/venv"]["packages"] == []
    assert ("FOO", "changed", "bar", "baz") in {(c["key"], c["change"], c["old"], c["new"]) for c in result["environment_variables"]}
    assert ("variant", "changed", "a", "b") in {(c["key"], c["change"], c["old"], c["new"]) for c in result["labels"]}
    text = render_diff(diff_images(facts_a, facts_b))
    assert "  ~ torch (pip) 2.3.0+rocm5.7 -> 2.4.0+rocm5.7" in text and "  - lightning (pip) 2.2.5" in text
    assert "no differences" in render_diff(diff_images(facts_a, facts_a))

    assert facts_a.envbuild["spec"] == "name: inventory-a\nsystem: local\n"
    assert facts_a.envbuild["lock"] == "torch==2.3.0\n"
    assert facts_a.environment["WITH_CONDA"] == "source /opt/miniconda3/bin/activate pytorch"
    assert facts_a.labels["team"] == "tests"
    assert facts_a.runscript.startswith("#!/bin/sh")
    partition = next(o for o in facts_a.objects if o["type"] == "partition")
    assert partition["compression"] == "gzip" and partition["block_size"] == 131072
    text = render_inspect(facts_a)
    for expected in ("squashfs, primary-system, amd64, gzip", "/opt/miniconda3/envs/pytorch  (conda, python 3.10, 5 pip, 3 conda)",
                     "team: tests", "FOO=bar", "90-environment.sh:", "envbuild lock (/.envbuild/lock):", "name: inventory-a"):
        assert expected in text
    assert json.loads(json.dumps(inspect_to_dict(facts_a)))["envbuild"]["lock"] == "torch==2.3.0\n"


# -- the commands ----------------------------------------------------------------------------


def test_packages_command_table_grep_json_matrix(tmp_path: Path, cli_env) -> None:
    a = str(fixture_image("gzip"))
    z = str(fixture_image("zstd"))
    result = run_cli([ENVBUILD, "packages", a, "--grep", "TORCH"], env_extra=cli_env)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["IMAGE", "ARCH", "ENVIRONMENT", "PACKAGE", "VERSION", "SOURCE"]
    assert {line.split()[1] for line in lines[1:]} == {"x86_64"}  # the SIF header's amd64
    assert [line.split()[2:] for line in lines[1:]] == [
        ["/opt/miniconda3/envs/pytorch", "pytorch", "2.3.0", "conda"], ["/opt/miniconda3/envs/pytorch", "torch", "2.3.0+rocm5.7", "pip"]]
    assert "broken-1.0.dist-info" in result.stderr  # a warning, not a failure

    nothing = run_cli([ENVBUILD, "packages", a, "--grep", "^tensorflow$"], env_extra=cli_env)
    assert (nothing.returncode, nothing.stdout) == (0, "")

    bad = run_cli([ENVBUILD, "packages", a, "--grep", "("], env_extra=cli_env)
    assert bad.returncode == 2 and "not a valid regular expression" in bad.stderr and "Traceback" not in bad.stderr

    document = json.loads(run_cli([ENVBUILD, "packages", a, "--json"], env_extra=cli_env).stdout)
    assert {(p["environment"], p["name"], p["version"], p["source"]) for p in document["packages"]} == as_set(read_inventory(a))
    assert {e["prefix"] for e in document["images"][0]["environments"]} >= {"/opt/venv", "/usr"}

    shown = run_cli([ENVBUILD, "packages", a, z, "--matrix", "--grep", "^(torch|six)$"], env_extra=cli_env)
    assert shown.returncode == 0, shown.stderr
    assert [line.split() for line in shown.stdout.splitlines()] == [
        ["PACKAGE", "layout-a.gzip.sif", "layout-a.zstd.sif"], ["six", "1.16.0", "1.16.0"],
        ["torch", "2.3.0+rocm5.7", "2.3.0+rocm5.7"]]
    as_json = json.loads(run_cli([ENVBUILD, "packages", a, "--matrix", "--json", "--grep", "^six$"], env_extra=cli_env).stdout)
    assert as_json["matrix"] == {"six": {a: "1.16.0"}}


def test_packages_command_reports_bad_files_and_lists_the_rest(tmp_path: Path, cli_env) -> None:
    text = tmp_path / "readme.sif"
    text.write_text("not an image")
    cut = tmp_path / "cut.sif"
    cut.write_bytes(fixture_image("gzip").read_bytes()[:40000])
    result = run_cli([ENVBUILD, "packages", str(text), str(fixture_image("gzip")), str(cut), "--grep", "^six$"], env_extra=cli_env)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert f"error: {text}: not a SIF image" in result.stderr
    assert f"error: {cut}:" in result.stderr and "truncated" in result.stderr and "fix:" in result.stderr
    assert "2 of 3 images could not be read" in result.stderr
    assert [line.split()[3] for line in result.stdout.splitlines()[1:]] == ["six"]


def test_packages_command_uses_the_cache_unless_told_not_to(tmp_path: Path, cli_env) -> None:
    image = tmp_path / "img.sif"
    shutil.copy(fixture_image("gzip"), image)
    first = run_cli([ENVBUILD, "packages", str(image), "--grep", "^six$"], env_extra=cli_env)
    assert first.returncode == 0
    entries = inventory_cache_entries(cli_env)
    assert len(entries) == 1
    # Plant a package in the cache entry: the next listing must come from the cache, --no-cache must not.
    key, data = marshal.loads(entries[0].read_bytes())
    data["packages"].append({"environment": "/usr", "name": "six-from-cache", "version": "0", "source": "pip"})
    entries[0].write_bytes(marshal.dumps((key, data)))
    cached = run_cli([ENVBUILD, "packages", str(image), "--grep", "^six"], env_extra=cli_env)
    assert "six-from-cache" in cached.stdout
    fresh = run_cli([ENVBUILD, "packages", str(image), "--grep", "^six", "--no-cache"], env_extra=cli_env)
    assert "six-from-cache" not in fresh.stdout and "six" in fresh.stdout


def test_inspect_and_diff_commands(tmp_path: Path, cli_env) -> None:
    a = str(fixture_image("gzip"))
    lay_out(tmp_path / "b", "b")
    shown = run_cli([ENVBUILD, "inspect", a], env_extra=cli_env)
    assert shown.returncode == 0, shown.stderr
    assert "envbuild spec (/.envbuild/spec.yaml):" in shown.stdout and "gzip, block 128.0 KiB" in shown.stdout
    data = json.loads(run_cli([ENVBUILD, "inspect", a, "--json"], env_extra=cli_env).stdout)
    assert data["labels"]["variant"] == "a" and data["objects"][-1]["compression"] == "gzip"
    changed = run_cli([ENVBUILD, "diff", a, str(tmp_path / "b")], env_extra=cli_env)
    assert changed.returncode == 0, changed.stderr
    assert "environment /opt/miniconda3/envs/pytorch: 1 added, 1 removed, 2 changed" in changed.stdout
    assert json.loads(run_cli([ENVBUILD, "diff", a, a, "--json"], env_extra=cli_env).stdout)["identical"] is True
    missing = run_cli([ENVBUILD, "inspect", str(tmp_path / "nope.sif")], env_extra=cli_env)
    assert missing.returncode == 1 and "cannot read" in missing.stderr and "Traceback" not in missing.stderr


@pytest.mark.parametrize(("line", "pin"), [
    ("Foo_Bar==1.2.3", ("foo-bar", "1.2.3")),
    ("numpy==2.1.0 \\", ("numpy", "2.1.0")),
    ("torch==2.5.1+cpu --hash=sha256:00ff", ("torch", "2.5.1+cpu")),
    ("# via torch==2.5.1", None),
    ("requests>=2", None),
    ("    --hash=sha256:00ff", None),
])
def test_parse_pin_reads_name_and_version_of_pinned_lines_only(line: str, pin: tuple[str, str] | None) -> None:
    from envbuild.inventory.pkgmeta import parse_pin

    assert parse_pin(line) == pin
