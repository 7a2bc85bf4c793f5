"""`envbuild import` and `envbuild export`: a definition file or a Dockerfile read into a spec, and a spec written
as one, in a format of the table in envbuild.convert.formats."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from envbuild.inventory.registryconfig import ConfigReader


class ImportedSpec(NamedTuple):
    text: str  # the spec, with the notes in a comment at its top
    notes: list[str]  # what could not be carried into it


def import_build_file(build_file: Path, output: Path | None, *, fmt: str | None, system: str,
                      build_args: Iterable[str], offline: bool = False) -> ImportedSpec:
    """`build_file` (in `fmt`, or the format detected) as a spec for `system`, written to `output` (None: only
    returned). The spec's files[] sources are written relative to the spec's directory (the current one for
    None). A Dockerfile's FROM image's config is read from its registry for the platform of `system`'s nodes,
    unless `offline`."""
    from envbuild.convert.buildargs import parse_build_args
    from envbuild.convert.formats import detect_format, format_named
    from envbuild.envspec.loadspec import load_spec_text
    from envbuild.envspec.specmodel import spec_name_for
    from envbuild.shared.errors import UsageError

    if not build_file.is_file():
        raise UsageError(f"{build_file} does not exist or is not a file", "give the path of a .def file or a Dockerfile")
    text = build_file.read_text(encoding="utf-8", errors="replace")
    kind = format_named(fmt) if fmt else detect_format(text, build_file.name)
    named_after = output or build_file
    name = spec_name_for(named_after.stem if named_after.suffix else named_after.name)
    prefix = os.path.relpath(build_file.absolute().parent, (output.absolute().parent if output else Path.cwd()))
    prefix = "" if prefix == "." else prefix
    result = kind.import_text(text, name, src_prefix=prefix, build_args=parse_build_args(build_args),
                              source=str(build_file), read_base=None if offline else _config_reader(system))
    result.spec["system"] = system
    rendered = result.render(str(build_file))
    load_spec_text(rendered, str(output or "<imported spec>"))  # a spec envbuild cannot load is a bug here, not the user's
    if output is not None:
        from envbuild.shared.safefiles import write_file

        write_file(output, rendered)  # a link planted at the name is replaced; a device (/dev/null) written in place
    return ImportedSpec(rendered, result.notes)


def _config_reader(system: str) -> ConfigReader:
    """read_image_config for the platform `system`'s nodes run (linux/amd64 where the system is not known)."""
    from functools import partial

    from envbuild.host.arch import go_arch, host_arch, system_arch
    from envbuild.inventory.registryconfig import DEFAULT_PLATFORM, read_image_config
    from envbuild.recipes.loadrecipe import load_recipe
    from envbuild.shared.errors import UsageError

    try:
        arch = go_arch(system_arch(load_recipe(system), host_arch()))
    except UsageError:  # the spec's check names an unknown system; the reading goes on for the common platform
        arch = ""
    return partial(read_image_config, platform=f"linux/{arch}" if arch else DEFAULT_PLATFORM)


def export_spec_file(spec: Path, fmt: str, output: Path | None, *, use_lock: bool) -> str:
    """The spec at `spec` written in the format `fmt`, its Python packages pinned to its lock when `use_lock` and
    the lock exists; written to `output` too unless it is None."""
    from envbuild.convert.formats import export_spec, format_named
    from envbuild.convert.specexport import ExportInput
    from envbuild.envspec.loadspec import load_spec
    from envbuild.lock.lockmodel import lock_path_for
    from envbuild.recipes.loadrecipe import load_recipe

    kind = format_named(fmt)
    loaded = load_spec(spec, check_host=False)
    pins, lock_source = None, None
    lock_file = lock_path_for(spec)
    if use_lock and lock_file.is_file():
        from envbuild.lock.fileformat import read_lock

        lock = read_lock(lock_file.read_text(encoding="utf-8"), str(lock_file))
        pins = {package.name: package.version for package in lock.packages}
        lock_source = str(lock_file)
    torch_index = None
    pytorch = loaded.spec.python.pytorch
    if pytorch is not None:
        torch_index = pytorch.index_url or load_recipe(loaded.recipe_ref).pytorch_index_for(pytorch.wheel_tag)
    text = export_spec(ExportInput(loaded.spec, str(spec), torch_index, pins, lock_source), kind)
    if output is not None:
        from envbuild.shared.safefiles import write_file

        write_file(output, text)
    return text
