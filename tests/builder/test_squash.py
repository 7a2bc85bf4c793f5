"""envbuild.sif.writer: the mksquashfs command and actions (pure), the SIF framing (pure, on a fake
squashfs), and real images squashed from a sandbox and run with apptainer in every compression."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from envbuild.builder.plan.actions import MakeDirs, Remove, Run, WriteFile
from envbuild.builder.plan.squashplan import squash_actions
from envbuild.host.node import usable_cpus
from envbuild.inventory.image import read_inventory
from envbuild.inventory.imagefacts import read_image_facts
from envbuild.shared.errors import UsageError
from envbuild.sif.compression import check_compression, compression_note, mksquashfs_argv
from envbuild.sif.format import PARTITION_OFFSET
from envbuild.sif.reader import read_object, read_sif_layout
from envbuild.sif.writer import METADATA_NAME, assemble, go_json, rootfs_arch, write_objects
from tests.support.inventory_layout import install_host_tools, lay_out

EPOCH = 1_700_000_000
COMMON = ("env", "-u", "SOURCE_DATE_EPOCH", "mksquashfs", "/w/sandbox", "/o/img.sif.partial", "-noappend")
TAIL = ("-processors", "4", "-offset", "32768")


# --- pure: the command ----------------------------------------------------------------------------


@pytest.mark.parametrize(("compression", "options"), [
    ("gzip", ("-comp", "gzip")),
    ("zstd", ("-comp", "zstd", "-Xcompression-level", "3")),
    ("lz4", ("-comp", "lz4")),
    ("xz", ("-comp", "xz")),
    ("gzip:6", ("-comp", "gzip", "-Xcompression-level", "6")),
    ("zstd:19", ("-comp", "zstd", "-Xcompression-level", "19")),
])
def test_mksquashfs_argv_per_compression(compression: str, options: tuple[str, ...]) -> None:
    argv = mksquashfs_argv("/w/sandbox", "/o/img.sif.partial", compression=compression, processors=4)
    assert argv == (*COMMON, *options, *TAIL)


def test_mksquashfs_argv_epoch_and_all_root() -> None:
    argv = mksquashfs_argv("/w/sandbox", "/o/img.sif.partial", processors=4, source_date_epoch=EPOCH, all_root=True)
    assert argv == (*COMMON, "-comp", "gzip", *TAIL, "-all-root", "-mkfs-time", str(EPOCH))
    # file times stay as they are (forcing them makes timestamp-based .pyc files stale)
    assert "-all-time" not in argv


def test_processors_default_to_the_cpus_this_process_may_use(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 3, 5}, raising=False)
    assert usable_cpus() == 3
    argv = mksquashfs_argv("/w/sandbox", "/o/img.sif.partial")
    assert argv[argv.index("-processors") + 1] == "3"


def test_squash_actions_golden() -> None:
    actions = squash_actions("/w/sandbox", "/o/img.sif.partial", compression="zstd", processors=4, source_date_epoch=EPOCH,
                             runtime_path="/usr/bin/apptainer", work_dir="/w", python="/venv/bin/python")
    assert [a.describe() for a in actions] == [
        "rm -rf /w/sif-objects",
        "mkdir -p /w/sif-objects",
        "cd / && /venv/bin/python -m envbuild.sif.writer metadata --runtime /usr/bin/apptainer --sandbox /w/sandbox --out /w/sif-objects",
        "env -u SOURCE_DATE_EPOCH mksquashfs /w/sandbox /o/img.sif.partial -noappend -comp zstd -Xcompression-level 3 "
        "-processors 4 -offset 32768 -mkfs-time 1700000000",
        "cd / && /venv/bin/python -m envbuild.sif.writer assemble --objects /w/sif-objects --offset 32768 --epoch 1700000000 "
        "/o/img.sif.partial",
    ]
    assert isinstance(actions[0], Remove) and isinstance(actions[1], MakeDirs)
    assert all(isinstance(a, Run) for a in actions[2:])


def test_squash_actions_without_epoch_and_with_a_definition() -> None:
    actions = squash_actions("/w/sandbox", "/o/img.sif.partial", processors=2, runtime_path="singularity", work_dir="/w",
                             definition="bootstrap: scratch\n")
    assert actions[0] == WriteFile("/w/sandbox/.singularity.d/Singularity", "bootstrap: scratch\n", root="/w/sandbox")
    assemble_argv = actions[-1].argv
    assert assemble_argv[0] == sys.executable and "--epoch" not in assemble_argv
    assert "-mkfs-time" not in actions[-2].argv


@pytest.mark.parametrize(("name", "message"), [
    ("zstd3", "unknown squashfs compression 'zstd3': accepted are gzip, zstd, lz4, xz"),
    ("lzo", "unknown squashfs compression 'lzo'"),
    ("", "unknown squashfs compression ''"),
    ("lz4:9", "squashfs compression lz4 takes no level"),
    ("gzip:10", "level '10' for gzip is out of range"),
    ("zstd:x", "level 'x' for zstd is out of range"),
])
def test_bad_compressions_are_refused_with_the_accepted_ones(name: str, message: str) -> None:
    with pytest.raises(UsageError) as error:
        check_compression(name)
    assert message in error.value.message
    assert error.value.hint
    with pytest.raises(UsageError):
        squash_actions("/s", "/o", compression=name, runtime_path="apptainer", work_dir="/w")


def test_compression_notes_name_the_runtimes() -> None:
    assert compression_note("gzip") is None and compression_note("gzip:6") is None
    assert "apptainer >= 1.4.0" in (compression_note("zstd") or "")
    assert "SingularityCE" in (compression_note("zstd:9") or "")
    assert "3.19" in (compression_note("lz4") or "")


def test_processors_must_be_positive() -> None:
    with pytest.raises(UsageError, match="at least 1"):
        mksquashfs_argv("/s", "/o", processors=0)


def test_epoch_must_fit_in_32_bits() -> None:
    with pytest.raises(UsageError, match="outside"):
        squash_actions("/s", "/o", source_date_epoch=2**32, runtime_path="apptainer", work_dir="/w")


def test_go_json_escapes_like_go() -> None:
    value = {"data": {"labels": {"a<b": "x & y > z", "é": "\u2028"}}, "type": "container"}
    assert go_json(value) == '{"data":{"labels":{"a\\u003cb":"x \\u0026 y \\u003e z","é":"\\u2028"}},"type":"container"}'.encode()


# --- pure: the SIF framing on a fake squashfs ------------------------------------------------------


def fake_partial(path: Path, bytes_used: int = 10_000, fill: bytes = b"\x42", offset: int = PARTITION_OFFSET) -> None:
    """What mksquashfs -offset leaves: zeros, then a squashfs (only the superblock's magic and
    bytes_used matter to assemble), padded to 4 KiB."""
    padded = -(-bytes_used // 4096) * 4096
    body = bytearray(fill * padded)
    body[:4] = b"hsqs"
    struct.pack_into("<Q", body, 40, bytes_used)
    path.write_bytes(bytes(offset) + bytes(body))


def test_assemble_writes_the_descriptors_apptainer_build_writes(tmp_path: Path) -> None:
    image = tmp_path / "img.sif"
    fake_partial(image)
    assemble(str(image), deffile=b"bootstrap: scratch\n", metadata=b'{"data":{}}', arch="amd64", epoch=EPOCH)
    layout = read_sif_layout(image)
    header = layout.header
    assert (header.launch_script, header.version, header.arch) == ("#!/usr/bin/env run-singularity\n", "01", "amd64")
    assert (header.created_at, header.modified_at) == (EPOCH, EPOCH)
    assert (header.descriptors_total, header.descriptors_free, header.descriptors_offset) == (48, 45, 4096)
    assert header.data_offset == 4096 + 48 * 585
    assert header.data_offset + header.data_size == layout.file_size
    kinds = [(o.id, o.group_id, o.data_type, o.name, o.created_at) for o in layout.objects]
    assert kinds == [(1, 1, "deffile", "", EPOCH), (2, 1, "generic-json", METADATA_NAME, EPOCH), (3, 1, "partition", "", EPOCH)]
    deffile, metadata, partition = layout.objects
    assert (partition.offset, partition.size) == (PARTITION_OFFSET, 12_288)
    assert (partition.fs_type, partition.part_type, partition.arch) == ("squashfs", "primary-system", "amd64")
    assert layout.primary_partition() == partition
    assert read_object(layout, deffile) == b"bootstrap: scratch\n"
    assert read_object(layout, metadata) == b'{"data":{}}'
    assert metadata.offset + metadata.size == layout.file_size
    assert image.stat().st_mode & 0o111  # executable: the launch script runs it


def test_assemble_is_deterministic_with_an_epoch_and_content_addressed(tmp_path: Path) -> None:
    images = {}
    for name, fill in (("a", b"\x42"), ("b", b"\x42"), ("c", b"\x43")):
        images[name] = tmp_path / f"{name}.sif"
        fake_partial(images[name], fill=fill)
        assemble(str(images[name]), deffile=b"d", metadata=b"{}", arch="amd64", epoch=EPOCH)
    assert images["a"].read_bytes() == images["b"].read_bytes()
    ids = {name: read_sif_layout(path).header.image_id for name, path in images.items()}
    assert ids["a"] == ids["b"] != ids["c"]
    # assembling again (a retried step) gives the same file: the squashfs size comes from its superblock
    before = images["a"].read_bytes()
    assemble(str(images["a"]), deffile=b"d", metadata=b"{}", arch="amd64", epoch=EPOCH)
    assert images["a"].read_bytes() == before


def test_assemble_without_epoch_uses_now_and_a_random_id(tmp_path: Path) -> None:
    ids = set()
    for name in ("a", "b"):
        image = tmp_path / f"{name}.sif"
        fake_partial(image)
        assemble(str(image), deffile=b"", metadata=b"{}", arch="arm64")
        header = read_sif_layout(image).header
        assert header.arch == "arm64" and header.created_at > EPOCH
        ids.add(header.image_id)
    assert len(ids) == 2


def test_assemble_at_another_aligned_offset(tmp_path: Path) -> None:
    image = tmp_path / "img.sif"
    fake_partial(image, offset=36864)  # where apptainer build puts it in the reference image
    assemble(str(image), deffile=b"d", metadata=b"{}", arch="amd64", offset=36864, epoch=EPOCH)
    partition = read_sif_layout(image).primary_partition()
    assert (partition.offset, partition.size) == (36864, 12_288)


def test_assemble_refuses_a_file_without_squashfs_at_the_offset(tmp_path: Path) -> None:
    image = tmp_path / "img.sif"
    image.write_bytes(bytes(PARTITION_OFFSET + 4096))
    with pytest.raises(SystemExit, match="no squashfs at offset 32768"):
        assemble(str(image), deffile=b"", metadata=b"{}", arch="amd64")
    with pytest.raises(SystemExit, match="multiple of 4096"):
        assemble(str(image), deffile=b"", metadata=b"{}", arch="amd64", offset=4096)


def test_rootfs_arch_reads_the_sandbox_programs(tmp_path: Path) -> None:
    install_host_tools(tmp_path, ("sh",))
    expected = {"x86_64": "amd64", "aarch64": "arm64"}.get(os.uname().machine)
    if expected:
        assert rootfs_arch(str(tmp_path)) == expected
    elf = bytearray(20)
    elf[:6] = b"\x7fELF\x02\x01"
    struct.pack_into("<H", elf, 18, 183)  # EM_AARCH64
    other = tmp_path / "other"
    (other / "bin").mkdir(parents=True)
    (other / "bin/sh").write_bytes(bytes(elf))
    assert rootfs_arch(str(other)) == "arm64"


# --- real images ----------------------------------------------------------------------------------


def run_actions(actions: tuple, work: Path) -> None:
    """Carry out the actions with the build executor, as `envbuild build` does; a failure raises StepFailed."""
    import io

    from envbuild.builder.execute.executor import BuildExecutor
    from envbuild.builder.plan.actions import Step

    executor = BuildExecutor(work / "squash.log", store_root=work / "store", out=io.StringIO())
    executor.execute_steps((Step("squash", "squash", actions),), None, "test")


def squash(sandbox: Path, image: Path, work: Path, **kwargs: object) -> Path:
    runtime = shutil.which("apptainer") or shutil.which("singularity")
    assert runtime
    run_actions(squash_actions(str(sandbox), str(image), runtime_path=runtime, work_dir=str(work), **kwargs), work)
    return image


def apptainer(*args: str) -> str:
    result = subprocess.run(["apptainer", *args], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


@pytest.fixture(scope="module")
def layout_tree(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, set[tuple[str, str, str, str]]]:
    """The inventory tests' synthetic ML tree, with a shell and cat from the host so it can run."""
    root = tmp_path_factory.mktemp("squash-tree") / "root"
    expected = lay_out(root, "a")
    install_host_tools(root)
    return root, expected


@pytest.mark.apptainer
@pytest.mark.parametrize("compression", ["gzip", "zstd", "lz4", "xz"])
def test_squashed_image_runs_and_reads_back(layout_tree, tmp_path: Path, compression: str) -> None:
    root, expected = layout_tree
    image = squash(root, tmp_path / "img.sif", tmp_path / "work", compression=compression, source_date_epoch=EPOCH)

    listing = apptainer("sif", "list", str(image))
    for kind in ("Def.FILE", "JSON.Generic", "FS (Squashfs/*System/"):
        assert kind in listing
    assert apptainer("exec", str(image), "sh", "-c", 'echo "$FOO"').strip() == "bar"  # 90-environment.sh sourced
    assert apptainer("exec", str(image), "cat", "/opt/venv/pyvenv.cfg").startswith("home = /usr/bin")
    inspected = json.loads(apptainer("inspect", "--json", "--labels", str(image)))
    assert inspected["data"]["attributes"]["labels"] == {"team": "tests", "variant": "a"}
    assert "exec python" in apptainer("inspect", "--runscript", str(image))

    facts = read_image_facts(str(image))  # the repo's own reader
    assert facts.labels == {"team": "tests", "variant": "a"}
    assert facts.environment["FOO"] == "bar"
    partition = next(o for o in facts.objects if o["type"] == "partition")
    assert partition["compression"] == compression and partition["created_at"] == EPOCH
    assert facts.sif and facts.sif["created_at"] == EPOCH
    inventory = read_inventory(str(image))
    assert {(p.environment, p.name, p.version, p.source) for p in inventory.packages} == expected

    again = squash(root, tmp_path / "again.sif", tmp_path / "work2", compression=compression, source_date_epoch=EPOCH)
    assert again.read_bytes() == image.read_bytes(), "same tree and epoch must give the same bytes"


@pytest.mark.apptainer
def test_metadata_is_what_apptainer_build_stores(layout_tree, tmp_path: Path) -> None:
    """apptainer build stores `inspect --all --json` of its build copy (with its own labels and
    definition added): our metadata for that same tree must be byte-identical to its object."""
    root, _ = layout_tree
    built = tmp_path / "built.sif"
    apptainer("build", "--force", str(built), str(root))
    layout = read_sif_layout(built)
    stored = {o.data_type: read_object(layout, o) for o in layout.objects if o.data_type != "partition"}
    tree = tmp_path / "unsquashed"
    subprocess.run(["unsquashfs", "-q", "-n", "-d", str(tree), "-o", str(layout.primary_partition().offset), str(built)],
                   check=True, capture_output=True)
    write_objects("apptainer", str(tree), str(tmp_path / "objects"))
    assert (tmp_path / "objects" / METADATA_NAME).read_bytes() == stored["generic-json"]
    assert (tmp_path / "objects" / "deffile").read_bytes() == stored["deffile"]


@pytest.mark.apptainer
def test_definition_and_all_root(layout_tree, tmp_path: Path) -> None:
    root, _ = layout_tree
    sandbox = tmp_path / "sandbox"
    shutil.copytree(root, sandbox, symlinks=True)
    os.chown(sandbox / "opt/venv/pyvenv.cfg", 1234, 1234)
    image = squash(sandbox, tmp_path / "img.sif", tmp_path / "work", compression="zstd", all_root=True,
                   definition="bootstrap: localimage\nfrom: envbuild\n")
    assert apptainer("inspect", "--deffile", str(image)).strip() == "bootstrap: localimage\nfrom: envbuild"
    layout = read_sif_layout(image)
    assert read_object(layout, layout.objects[0]) == b"bootstrap: localimage\nfrom: envbuild\n"
    listing = subprocess.run(["unsquashfs", "-lln", "-o", str(PARTITION_OFFSET), str(image), "squashfs-root/opt/venv/pyvenv.cfg"],
                             capture_output=True, text=True, check=True).stdout
    assert " 0/0 " in listing, listing


@pytest.mark.apptainer
def test_debootstrap_rootfs_runs_and_is_reproducible(tmp_path: Path, debootstrap_base: Path) -> None:
    """A real Debian tree (the shared test store's debootstrap base, made by envbuild's base steps when
    missing; only read here): Python runs from the image, and two squashes with the same epoch give the
    same bytes."""
    rootfs = debootstrap_base
    first = squash(rootfs, tmp_path / "a.sif", tmp_path / "wa", compression="zstd", source_date_epoch=EPOCH)
    assert apptainer("exec", str(first), "python3", "-c", "import sys; print(sys.version_info[0])").strip() == "3"
    second = squash(rootfs, tmp_path / "b.sif", tmp_path / "wb", compression="zstd", source_date_epoch=EPOCH,
                    processors=1)
    assert first.read_bytes() == second.read_bytes(), "mksquashfs -reproducible: same bytes with 1 and N processors"
