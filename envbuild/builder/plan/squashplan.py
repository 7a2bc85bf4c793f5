"""The squash step of a build as plan actions (pure): the sandbox becomes a SIF through envbuild.sif.writer's
helper and mksquashfs, and a layered build's step that writes only what changed (envbuild.sif.layeredwriter)."""

from __future__ import annotations

import sys
from dataclasses import replace

from envbuild.builder.plan.actions import Action, MakeDirs, Remove, Run, WriteFile
from envbuild.sif.compression import check_compression, checked_epoch, mksquashfs_argv
from envbuild.sif.format import PARTITION_OFFSET
from envbuild.store.layout import EntryPaths

NICE = ("nice", "-n", "10")  # what runs beside the tests of a layered build (squash_with_manifest)
OBJECTS_DIR = "sif-objects"  # under the work dir: the definition, metadata and arch the writer's helper finds
# Where envbuild's own helpers (`python -m envbuild.sif...`) run: `-m` puts the working directory first on
# sys.path, and the user's (a project others may write) could hold a json.py or an envbuild/. Only
# root may write /; the helpers' paths are absolute, and envbuild is found as the build's own Python finds it
# (its site-packages, or the checkout bin/envbuild puts on $PYTHONPATH).
HELPER_CWD = "/"


def squash_actions(sandbox: str, output_partial: str, *, compression: str = "gzip", processors: int | None = None,
                   source_date_epoch: int | None = None, runtime_path: str, work_dir: str, all_root: bool = False,
                   definition: str | None = None, python: str | None = None,
                   mksquashfs: str = "mksquashfs", upper: str | None = None) -> tuple[Action, ...]:
    """The actions that turn the finished `sandbox` into the SIF file `output_partial`.

    `runtime_path`: apptainer or singularity, asked for the inspect metadata. `work_dir`: the build's
    scratch directory (the metadata files go to work_dir/sif-objects). `all_root`: store every file
    as owned by root (pass True when the build runs as a non-root user, as apptainer build does).
    `definition`: written to the sandbox's /.singularity.d/Singularity first, so that the Def.FILE
    object, `apptainer inspect --deffile` and the file in the image agree; None keeps the file the
    sandbox has (or none). `python`: the interpreter that runs this module's helper (this one).
    `upper`: a directory whose files lie over the sandbox's (envbuild.builder.plan.upperplan); the metadata is
    then read from both (only the layered squash uses that, never the mksquashfs action here).
    """
    check_compression(compression)
    if source_date_epoch is not None:
        checked_epoch(source_date_epoch)
    helper = (python or sys.executable, "-m", "envbuild.sif.writer")
    objects = f"{work_dir}/{OBJECTS_DIR}"
    actions: list[Action] = []
    if definition is not None:
        actions.append(WriteFile(f"{sandbox}/.singularity.d/Singularity", definition, root=sandbox))
    actions += [
        Remove((objects,)),
        MakeDirs((objects,)),
        # Before the long squash, so that a runtime that cannot inspect the sandbox fails early.
        Run((*helper, "metadata", "--runtime", runtime_path, "--sandbox", sandbox, *(("--upper", upper) if upper else ()),
             "--out", objects), cwd=HELPER_CWD),
        Run(mksquashfs_argv(sandbox, output_partial, compression=compression, processors=processors,
                            source_date_epoch=source_date_epoch, all_root=all_root, mksquashfs=mksquashfs)),
        Run((*helper, "assemble", "--objects", objects, "--offset", str(PARTITION_OFFSET),
             *(("--epoch", str(source_date_epoch)) if source_date_epoch is not None else ()), output_partial),
            cwd=HELPER_CWD),
    ]
    return tuple(actions)


def squash_with_manifest(squash: tuple[Action, ...], *, sandbox: str, partial: str, work: str, entry_dir: str,
                         compression: str, all_root: bool, source_date_epoch: int | None, processors: int | None,
                         runtime: str, python: str, parent_dir: str | None, upper: str | None = None) -> tuple[Action, ...]:
    """The squash actions of a build (envbuild.builder.plan.squashplan.squash_actions: ..., metadata, mksquashfs,
    assemble) made to leave the tree manifest in the image entry (`entry_dir`), or, with `parent_dir`
    (a stored full image's entry), to write the layered image instead of squashing everything. `upper`:
    the user layer's files lie in that directory over `sandbox` (the env layer: envbuild.builder.plan.upperplan)."""
    manifest_out = EntryPaths(entry_dir).manifest
    common = ("--compression", compression, *(("--all-root",) if all_root else ()))
    if parent_dir is None:
        return (*squash, Run((python, "-m", "envbuild.sif.manifest", *common, sandbox, manifest_out), cwd=HELPER_CWD))
    # The spec's tests, beside these, are a layered build's longest path (one imports torch, transformers and
    # lightning, slower at equal priority with the rest of this step than with this step niced); this step's
    # shorter work then takes the CPU they leave.
    metadata = squash[-3]
    assert isinstance(metadata, Run) and "metadata" in metadata.argv, metadata
    return (*squash[:-3], replace(metadata, argv=(*NICE, *metadata.argv)), Run((
        *NICE, python, "-m", "envbuild.sif.layeredwriter", "--sandbox", sandbox, *(("--upper", upper) if upper else ()),
        "--parent-sif", EntryPaths(parent_dir).image,
        "--manifest", EntryPaths(parent_dir).manifest, "--manifest-out", manifest_out, "--objects", f"{work}/{OBJECTS_DIR}",
        "--work", work, *common, *(("--processors", str(processors)) if processors else ()),
        *(("--epoch", str(source_date_epoch)) if source_date_epoch is not None else ()), "--runtime", runtime, partial),
        cwd=HELPER_CWD))
