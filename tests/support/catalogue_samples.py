"""A catalogue made of hand-written facts (no files): three images and one that could not be read, with
text that needs escaping. The golden page and the JSON tests use it."""

from __future__ import annotations

from envbuild.catalogue.cataloguedata import Catalogue, ImageEntry, build_catalogue
from envbuild.inventory.imagefacts import ImageFacts
from envbuild.inventory.pyenvs import Environment, Inventory, Package, Problem

VENV = "/opt/envbuild/venv"
CONDA = "/opt/miniconda3/envs/pytorch"


def _partition(compression: str) -> dict[str, object]:
    return {"id": 3, "type": "partition", "offset": 32768, "size": 1 << 28, "fs_type": "squashfs",
            "part_type": "primary-system", "arch": "amd64", "version": "4.0", "compression": compression,
            "block_size": 131072, "inodes": 40000, "bytes_used": 1 << 28, "created_at": 1795400000}


def _sif(path: str, compression: str, packages: list[Package], environments: list[Environment], *,
         labels: dict[str, str], record: dict[str, object] | None = None, problems: list[Problem] | None = None) -> ImageFacts:
    return ImageFacts(
        path=path, file_size=(1 << 28) + 40960,
        sif={"version": "01", "arch": "amd64", "id": "00000000-0000-0000-0000-000000000001",
             "created_at": 1795400000, "modified_at": 1795400000},
        objects=[{"id": 1, "type": "deffile", "offset": 0, "size": 40}, _partition(compression)],
        labels=labels, envbuild={"spec": None, "build_record": record, "lock": None, "pip_freeze_lines": None},
        inventory=Inventory(environments=environments, packages=packages, problems=problems or []),
    )


def _record(name: str, compression: str) -> dict[str, object]:
    return {"record_format": 2, "envbuild_version": "0.1.0", "built_at": "2026-11-20T09:30:00Z",
            "spec": {"name": name, "sha256": "a" * 64}, "lock": {"sha256": "b" * 64, "python": "3.11.2"},
            "system": "lumi", "base": {"ref": "docker://rocm/pytorch:rocm6.2", "digest": "sha256:" + "c" * 64},
            "installer": "uv 0.13.9", "runtime": {"name": "apptainer", "version": "apptainer version 1.4.5"},
            "compression": compression}


def sample_entries() -> list[ImageEntry]:
    venv = [Environment(VENV, "venv", (f"{VENV}/lib/python3.11/site-packages",), "3.11")]
    conda = [Environment(CONDA, "conda", (f"{CONDA}/lib/python3.10/site-packages",), "3.10")]
    old = _sif("/appl/images/pytorch-2.3.sif", "gzip", [
        Package(VENV, "torch", "2.3.0", "pip"), Package(VENV, "numpy", "1.26.4", "pip"),
        Package(VENV, "Lightning", "2.2.5", "pip")], venv,
        labels={"maintainer": "hpc-support", "org.envbuild.base": "docker://rocm/pytorch:rocm6.2"},
        record=_record("pytorch-2.3", "gzip:6"))
    new = _sif("/appl/images/pytorch-2.4.sif", "zstd", [
        Package(VENV, "torch", "2.4.0", "pip"), Package(VENV, "numpy", "1.26.4", "pip"),
        Package(VENV, "accelerate", "0.31.0", "pip")], venv,
        labels={"maintainer": "hpc-support"}, record=_record("pytorch-2.4", "zstd"))
    site = _sif("/appl/other/lumi-pytorch.sif", "xz", [
        Package(CONDA, "pytorch", "2.3.0", "conda"), Package(CONDA, "torch", "2.3.0+rocm5.7", "pip"),
        Package(CONDA, "numpy", "1.26.4", "conda"), Package(CONDA, "numpy", "1.26.4", "pip")], conda,
        labels={"org.label-schema.usage.singularity.deffile.bootstrap": "docker",
                "org.label-schema.usage.singularity.deffile.from": "rocm/pytorch:<latest>",
                "note": 'say "hi" & <script>alert(1)</script>'},
        problems=[Problem(f"{CONDA}/lib/python3.10/site-packages/broken-1.0.dist-info/METADATA", "missing")])
    return [ImageEntry(old.path, old), ImageEntry(new.path, new), ImageEntry(site.path, site),
            ImageEntry("/appl/images/<odd>.sif", error="not a SIF image (no SIF_MAGIC in the header)")]


def sample_catalogue() -> Catalogue:
    return build_catalogue(sample_entries(), generated_at="2026-11-24 10:00 UTC", envbuild_version="0.1.0",
                           title="LUMI images & <friends>")
