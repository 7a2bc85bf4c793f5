"""Read a spec file into a validated `Spec`, turning every problem into a located, fixable message."""

from __future__ import annotations

import copy
import difflib
import hashlib
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, get_origin

from pydantic import BaseModel, ValidationError

from envbuild.envspec.specmodel import CHECKED_TOGETHER, GROUP, OTHERS, FileCopy, Spec
from envbuild.host.secrets import secret_reason
from envbuild.recipes.loadrecipe import available_recipes, is_recipe_path, load_recipe, recipe_reference, recipes_dir
from envbuild.shared.envnames import ENV_NAME_FIX
from envbuild.shared.errors import SpecError, SpecProblem, UsageError
from envbuild.shared.yamlsource import FieldPath, LocatedDocument, load_yaml_file, parse_yaml_text

if TYPE_CHECKING:
    from pydantic_core import ErrorDetails

    from envbuild.recipes.protocols import SystemRecipe


@dataclass(frozen=True)
class LoadedSpec:
    """A validated spec plus where it came from (for relative paths, labels and the embedded copy)."""

    spec: Spec
    path: Path
    text: str
    warnings: tuple[SpecProblem, ...] = ()  # located, not errors: secrets the spec would bake into the image
    torch_variant_origin: str | None = None  # where python.pytorch.variant came from, for the dry run

    @property
    def torch_variant_note(self) -> str:
        """'# torch variant rocm7.0: the lumi-g recipe's default_variant (recipes/lumi-g.yaml:LINE)\n', or ''."""
        pytorch = self.spec.python.pytorch
        if pytorch is None or self.torch_variant_origin is None:
            return ""
        return f"# torch variant {pytorch.variant}: {self.torch_variant_origin}\n"

    @property
    def directory(self) -> Path:
        return self.path.parent

    @property
    def recipe_ref(self) -> str:
        """The spec's `system:` as load_recipe takes it: a recipe's name, or a recipe file's path made absolute
        against the spec file's directory (never the working directory)."""
        return recipe_reference(self.spec.system, str(self.directory.absolute()))

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()

    def resolve_host_path(self, relative: str) -> Path:
        """A path written in the spec, relative to the spec file's directory."""
        candidate = Path(relative).expanduser()
        return candidate if candidate.is_absolute() else (self.directory / candidate).resolve()


def load_spec(path: Path, *, check_host: bool = True) -> LoadedSpec:
    """Load and validate `path`. With `check_host`, also check what the spec refers to on this machine
    (recipe exists, `files[].src` and local base images exist)."""
    document = load_yaml_file(path)
    text = path.read_text(encoding="utf-8")
    return _validate(document, text, path, check_host=check_host)


def load_build_input(path: Path, *, system: str | None = None, accept_licenses: bool = False) -> LoadedSpec:
    """A spec, or a plain conda environment file (recognised by its top-level `dependencies:`) turned into
    one: its content under `conda:`, the system from `system` or the host's recipe, the base image from
    that recipe's `cotainr:` facts. `system` and `accept_licenses` are for env files only."""
    from envbuild.envspec.conda import looks_like_conda_env_file

    document = load_yaml_file(path)
    if not looks_like_conda_env_file(document.data):
        if system or accept_licenses:
            flag = "--system" if system else "--accept-licenses"
            raise SpecError([SpecProblem(document.file, 1, 1, "", f"{flag} applies to conda environment files; "
                                         f"{path} is a spec", "write `system:` / `conda: {accept_licenses: true}` in the spec")])
        return _validate(document, path.read_text(encoding="utf-8"), path, check_host=True)
    return _load_conda_env_file(path, document, system=system, accept_licenses=accept_licenses)


def _load_conda_env_file(path: Path, document: LocatedDocument, *, system: str | None, accept_licenses: bool) -> LoadedSpec:
    import os

    from envbuild.envspec.conda import spec_from_env_file
    from envbuild.envspec.specmodel import spec_name_for
    from envbuild.recipes.detect import detect_system

    known = available_recipes()
    name, why = (system, "--system") if system else detect_system(os.environ)
    if not is_recipe_path(name) and name not in known:
        raise SpecError([SpecProblem(document.file, 1, 1, "", f"no system recipe named {name!r} ({why})",
                                     f"known systems: {', '.join(known)}, or a recipe file's path (./mysite.yaml)")])
    recipe = load_recipe(name)
    if is_recipe_path(name):  # a recipe file (--system ./mysite.yaml): the spec made of the env file names it absolute
        name = os.path.abspath(name)
    base = recipe.cotainr.base_image
    if not base:
        with_base = [n for n in known if load_recipe(n).cotainr.base_image]
        raise SpecError([SpecProblem(
            document.file, 1, 1, "", f"the {recipe.name} recipe ({why}) names no base image for conda builds (cotainr)",
            f"pass --system (or set ENVBUILD_SYSTEM) with one that does ({', '.join(with_base)}), or write a spec with base: and conda: "
            f"(envbuild build --help; the conda section takes this file's channels and dependencies as they are)")])
    try:
        text = spec_from_env_file(document.data, name=spec_name_for(path.stem), system=name, base=base,
                                  source=str(path), accept_licenses=accept_licenses)
    except ValueError as exc:
        raise SpecError([SpecProblem(document.file, 1, 1, "", str(exc), "a conda env file has name, channels, "
                                     "dependencies (with an optional pip: list) and variables")]) from None
    generated = parse_yaml_text(text, f"{path} (as a spec)")
    return _validate(generated, text, path, check_host=True)


def load_spec_text(text: str, name: str = "<spec>", *, check_host: bool = False) -> LoadedSpec:
    """Validate spec text (used by tests and `envbuild validate -`)."""
    document = parse_yaml_text(text, name)
    return _validate(document, text, Path(name), check_host=check_host)


def _validate(document: LocatedDocument, text: str, path: Path, *, check_host: bool) -> LoadedSpec:
    if document.data is None:
        raise SpecError([SpecProblem(document.file, 1, 1, "", "the spec is empty", "start from envs/local-cpu-pytorch.yaml")])
    if not isinstance(document.data, dict):
        raise SpecError(
            [SpecProblem(document.file, 1, 1, "", f"the spec must be a mapping of fields, not a {type(document.data).__name__}",
                         "write `name: ...`, `base: ...` etc. at the top level")]
        )
    # Every problem at once: when the model refuses parts of the spec, the checks after it (the system, the
    # torch companions, the files and base image on this host) run on the spec without those parts.
    problems: list[SpecProblem] = []
    wrong: frozenset[str] = frozenset()
    try:
        spec = Spec.model_validate(document.data)
    except ValidationError as exc:
        problems, wrong, rest = _model_problems(document, exc)
        if rest is None:
            raise SpecError(_in_file_order(problems)) from None
        spec = rest
    from envbuild.envspec.systemvariant import system_torch_variant

    recipe, recipe_problem = _system_recipe(document, spec, path)
    try:
        chosen = system_torch_variant(document, spec, recipe)
    except SpecError as exc:
        raise SpecError(_in_file_order(problems + exc.problems)) from None
    loaded = LoadedSpec(spec=chosen.spec, path=path, text=text, torch_variant_origin=chosen.origin,
                        warnings=(*secret_warnings(document), *chosen.warnings))
    problems += _family_problems(document)
    if check_host:
        if recipe_problem is not None and "system" not in wrong:  # (the default stands in for a system written wrong)
            problems.append(recipe_problem)
        problems += _host_problems(document, loaded, wrong)
    if problems:
        raise SpecError(_in_file_order(problems))
    if check_host:
        loaded = replace(loaded, warnings=(*loaded.warnings, *_mode_warnings(document, loaded)))
    return loaded


def _in_file_order(problems: list[SpecProblem]) -> list[SpecProblem]:
    return sorted(problems, key=lambda p: (p.line, p.column))


# What stands for a required top-level field the model refused, so that the rest of the spec can be checked.
# No check reads the name; the base's stand-in is no localimage (nothing to look for on the host), and the
# checks that read the base's kind (CHECKED_TOGETHER) are left out with it.
_STAND_INS: dict[str, Any] = {"name": "spec", "base": "docker://stand-in"}


def _model_problems(document: LocatedDocument, exc: ValidationError) -> tuple[list[SpecProblem], frozenset[str], Spec | None]:
    """Every problem the model finds in the spec, the top-level fields that have them, and the spec without
    the parts that have them (None only if it cannot be made; then the later checks do not run).

    pydantic checks every field at once, but the checks across fields (Spec's model validators) run only
    when every field is valid: they run here on what is left, and a problem they find is one more to report."""
    data: dict[Any, Any] = document.data
    problems: list[SpecProblem] = []
    wrong: set[str] = set()
    errors = exc.errors()
    for _attempt in range(3):  # the parts' problems, then those across the rest, then what is left is valid
        for error in errors:
            problem = _problem_from_error(document, error)
            if not any((p.field, p.message) == (problem.field, problem.message) for p in problems):
                problems.append(problem)
            loc = _field_path(error)
            wrong.add(str(loc[0]) if loc else "")
        data = _without_wrong_parts(data, errors)
        try:
            rest = Spec.model_validate(data)
        except ValidationError as again:
            errors = again.errors()
            continue
        return _with_waiting_checks(document, problems), frozenset(wrong), rest
    return _with_waiting_checks(document, problems), frozenset(wrong), None


def _without_wrong_parts(data: dict[Any, Any], errors: list[ErrorDetails]) -> dict[Any, Any]:
    """`data` without each part an error is in: the smallest field around it that may be left out (its default
    stands in), or the stand-in of a required one; a problem across parts leaves out the parts those checks are
    about (overlay:, conda:)."""
    kept = copy.deepcopy(data)
    for error in errors:
        loc = _field_path(error)
        part = _leavable_part(data, loc)
        if part is not None:
            _remove(kept, part)
            continue
        if loc and loc[0] in _STAND_INS:
            kept[loc[0]] = _STAND_INS[loc[0]]
        elif loc:
            kept.pop(loc[0], None)
        if not loc or loc[0] == "base":
            for about in CHECKED_TOGETHER:
                kept.pop(about, None)
    return kept


def _leavable_part(data: Any, loc: FieldPath) -> FieldPath | None:
    """The deepest field on the way to `loc` that the spec may leave out: an unknown field, an entry of a
    mapping (env:, labels:), or a field with a default. Never an item of a list (the items after it would
    move, and the checks that follow locate files[] by their index)."""
    model: type[BaseModel] | None = Spec
    node, leavable = data, None
    for depth, part in enumerate(loc):
        if not isinstance(node, dict) or part not in node:
            return leavable
        if model is None:  # an entry of a mapping field
            return loc[: depth + 1]
        info = model.model_fields.get(part) if isinstance(part, str) else None
        if info is None:
            return loc[: depth + 1]
        if not info.is_required():
            leavable = loc[: depth + 1]
        model = _model_of(info.annotation) if get_origin(info.annotation) is not dict else None
        node = node[part]
    return leavable


def _remove(data: dict[Any, Any], part: FieldPath) -> None:
    """`data` without `part`, if it is still there (another error's part may have held it)."""
    *parents, last = part
    node: Any = data
    for key in parents:
        node = node.get(key) if isinstance(node, dict) else None
    if isinstance(node, dict):
        node.pop(last, None)


def _with_waiting_checks(document: LocatedDocument, problems: list[SpecProblem]) -> list[SpecProblem]:
    """`problems`, the first one of the parts a check across parts reads (while the part it is about is in the
    spec) saying that the check waits for them; the same for the torch companions that wait for a valid torch
    version."""
    ordered = _in_file_order(problems)
    notes: dict[int, list[str]] = {}

    def note(where: int, text: str) -> None:
        notes.setdefault(where, []).append(text)

    for about, reads in CHECKED_TOGETHER.items():
        if about not in document.data:
            continue
        waiting = [i for i, problem in enumerate(ordered) if _top_level(problem.field) in reads]
        parts = list(dict.fromkeys(f"{_top_level(ordered[i].field)}:" for i in waiting))
        if waiting:
            they = parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
            note(waiting[0], f"once {they} {'is' if len(parts) == 1 else 'are'} fixed, {about}: is checked against "
                             f"{'it' if len(parts) == 1 else 'them'}")
    if _versioned_companions(document.data):
        for i, problem in enumerate(ordered):
            if problem.field.startswith("python.pytorch.version"):
                note(i, "then the torchvision/torchaudio versions listed are checked against this torch version")
                break
    return [SpecProblem(p.file, p.line, p.column, p.field, p.message, "; ".join([*([p.hint] if p.hint else []), *notes[i]]))
            if i in notes else p for i, p in enumerate(ordered)]


def _top_level(field: str) -> str:
    """'python' of 'python.pytorch.version', 'files' of 'files[1].dest'."""
    return re.split(r"[.\[]", field, maxsplit=1)[0]


def _field_path(error: ErrorDetails) -> FieldPath:
    return tuple(part for part in error["loc"] if not _is_union_tag(part))


def _listed_requirements(data: Any) -> list[tuple[FieldPath, str]]:
    """(where, text) of every requirement written under python: (pytorch.extras, packages), as written."""
    python = data.get("python") if isinstance(data, dict) else None
    if not isinstance(python, dict):
        return []
    pytorch = python.get("pytorch")
    extras = pytorch.get("extras") if isinstance(pytorch, dict) else None
    listed: list[tuple[FieldPath, str]] = []
    for loc, items in ((("python", "pytorch", "extras"), extras), (("python", "packages"), python.get("packages"))):
        if isinstance(items, list):
            listed += [((*loc, i), text) for i, text in enumerate(items) if isinstance(text, str)]
    return listed


def _versioned_companions(data: Any) -> bool:
    """Whether a torchvision or torchaudio with a version is listed (checked against the torch version)."""
    from packaging.requirements import InvalidRequirement, Requirement

    from envbuild.envspec.torchfamily import COMPANIONS

    for _loc, text in _listed_requirements(data):
        try:
            req = Requirement(text)
        except InvalidRequirement:
            continue
        if req.name in COMPANIONS and req.specifier:
            return True
    return False


def _family_problems(document: LocatedDocument) -> list[SpecProblem]:
    """torchvision/torchaudio next to `pytorch:` whose version cannot go with the spec's torch (the model
    pins those without a version; see envbuild.envspec.torchfamily). Read from the spec as written, so that
    they are checked whatever else is wrong in it."""
    from envbuild.envspec.torchfamily import companion_problem

    python = document.data.get("python")
    pytorch = python.get("pytorch") if isinstance(python, dict) else None
    version = pytorch.get("version") if isinstance(pytorch, dict) else None
    if not isinstance(version, str):
        return []
    problems: list[SpecProblem] = []
    for loc, text in _listed_requirements(document.data):
        found = companion_problem(text, version)
        if found:
            pos = document.position_of(loc)
            problems.append(SpecProblem(document.file, pos.line, pos.column, _dotted(loc), *found))
    return problems


SRC_FIX = ("paths in files[].src are relative to the spec file's directory and stay inside it: copy the file next "
           "to the spec, or set `allow_outside_spec_dir: true` on this entry to copy it from where it is")
# Hints for the pydantic error types users meet most; the message itself says what is wrong.
_FIELD_HINTS: dict[str, str] = {
    "name": "use letters, digits, '.', '_' and '-', starting with a letter or digit (e.g. my-env)",
    "base": "e.g. `base: debootstrap:bookworm`, `base: docker://rocm/pytorch:latest`, `base: localimage:/path/img.sif`",
    "python.pytorch.version": "quote the version so YAML keeps it text, e.g. version: '2.13.0'",
    "python.installer": "use auto, uv or pip",
    "version": "this envbuild reads spec format version 1; write `version: 1` or leave it out",
    "files[].src": SRC_FIX,
    "files[].dest": "write the absolute path the file gets inside the image, without '..', e.g. /opt/data/file.txt",
    "env_shell": "write it as a %environment section would run it; `bash -n` on the lines checks them as every "
                 "container start will read them",
}


def _problem_from_error(document: LocatedDocument, error: ErrorDetails) -> SpecProblem:
    loc = _field_path(error)
    kind = error["type"]
    field = _dotted(loc)
    pos = document.position_of(loc)
    message = error["msg"]
    hint: str | None = None
    if message.startswith("Value error, "):
        message = message[len("Value error, ") :]
    if kind == "extra_forbidden":
        allowed = _allowed_fields(loc[:-1])
        unknown = str(loc[-1])
        message = f"unknown field {unknown!r}"
        close = difflib.get_close_matches(unknown, allowed, n=1)
        hint = (f"did you mean {close[0]!r}? " if close else "") + f"allowed here: {', '.join(allowed)}"
    elif kind == "missing":
        message = "required field is missing"
        hint = _FIELD_HINTS.get(field) or f"add `{loc[-1]}:` here"
        parent = loc[:-1]
        pos = document.position_of(parent) if parent else document.positions.get((), pos)
    elif kind in ("string_type", "int_type", "dict_type", "tuple_type", "list_type", "model_type", "bool_type"):
        expected = {
            "string_type": "a string", "int_type": "an integer", "dict_type": "a mapping (key: value lines)",
            "tuple_type": "a list (lines starting with '- ')", "list_type": "a list (lines starting with '- ')",
            "model_type": "a mapping (key: value lines)", "bool_type": "true or false",
        }[kind]
        message = f"expected {expected}, got {_describe(error.get('input'))}"
        hint = _FIELD_HINTS.get(field)
    elif kind == "string_pattern_mismatch":
        message = f"{error.get('input')!r} does not match the pattern {error['ctx']['pattern']}"
        hint = _FIELD_HINTS.get(field)
    elif kind == "literal_error":
        hint = _FIELD_HINTS.get(field)
    else:
        hint = _FIELD_HINTS.get(field) or _FIELD_HINTS.get(re.sub(r"\[\d+\]", "[]", field))
    if error["loc"][-1:] == ("[key]",) and loc[:1] == ("env",):  # a variable's name was refused
        hint = ENV_NAME_FIX
    return SpecProblem(document.file, pos.line, pos.column, field, message, hint)


def _is_union_tag(part: Any) -> bool:
    # pydantic adds the chosen member's type name (e.g. 'str', 'bool') to a union field's loc.
    return isinstance(part, str) and part in {"str", "bool", "none", "int", "float", "[key]"}


def _dotted(loc: FieldPath) -> str:
    text = ""
    for part in loc:
        if isinstance(part, str) and not part.isprintable():  # a key with a newline: keep the message one line
            part = repr(part)
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _describe(value: Any) -> str:
    if value is None:
        return "nothing (an empty value)"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return f"{type(value).__name__} {value!r}"


def _allowed_fields(parent: FieldPath) -> list[str]:
    model: type[BaseModel] | None = Spec
    for part in parent:
        if model is None or isinstance(part, int):
            continue
        info = model.model_fields.get(str(part))
        model = _model_of(info.annotation) if info else None
    if model is None:
        return []
    return list(model.model_fields)


def _model_of(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        found = _model_of(arg)
        if found is not None:
            return found
    return None


def file_source_problem(item: FileCopy, spec_dir: str) -> tuple[str, str] | None:
    """(what is wrong, the fix) with a files[] entry's source on this host, or None. The source is found as the
    build finds it (FileCopy.host_source) and, unless the entry allows it, must not lead out of the spec file's
    directory through a symbolic link either."""
    source = item.host_source(spec_dir)
    # Where the file is missing, where it may be read from is not the problem: the fix is the file or the path.
    read_from = "as written" if os.path.isabs(os.path.expanduser(item.src)) else f"from the spec file's directory {spec_dir}"
    if not os.path.lexists(source):
        return (f"{item.src!r} does not exist (resolved to {source})",
                f"correct src (it is read {read_from}) or put the file at {source}")
    if not os.path.exists(source):
        return (f"{item.src!r} is a symbolic link to nothing ({source} -> {os.readlink(source)})",
                f"point the link at an existing file, or name the file itself in src (it is read {read_from})")
    if item.allow_outside_spec_dir:
        return None
    real, home = os.path.realpath(source), os.path.realpath(spec_dir)
    if real != home and not real.startswith(home.rstrip("/") + "/"):
        return f"{item.src!r} leads out of the spec file's directory {home} (to {real})", SRC_FIX
    return None


def _mode_warnings(document: LocatedDocument, loaded: LoadedSpec) -> list[SpecProblem]:
    """files[] whose source the group or others cannot read on this host, and whose entry does not let them
    (no `mode:`, or one without their read bit): the image keeps the file from them inside, but anyone who can
    read the image file reads every file in it (unsquashfs), so the build writes the image file without their
    read permission too (envbuild.builder.execute.fsactions). Say so, where a umask of 0007 or 0077 or a private
    directory (~/.ssh) makes it easy to miss."""
    warnings = []
    for index, item in enumerate(loaded.spec.files):
        source = item.host_source(str(loaded.directory.absolute()))
        if not os.path.lexists(source):
            continue
        hidden = hidden_from(source) & item.readers_left_to_source
        if not hidden:
            continue
        who = "others" if hidden == OTHERS else "its group and others" if hidden == GROUP | OTHERS else "its group"
        pos = document.position_of(("files", index, "src"))
        warnings.append(SpecProblem(
            document.file, pos.line, pos.column, f"files[{index}].src",
            f"{item.src!r} cannot be read by {who} on this host ({_modes_of(source)}): the image file is written "
            f"without permissions for {who.removeprefix('its ')} too (0644 becomes {0o644 & ~hidden:04o}), as anyone "
            "who can read an image can read every file in it",
            "if they should read it, write `mode: '0644'` on this entry (or chmod the file); if not, keep it out of "
            "the image and bind it at run time (envrun --bind)"))
    return warnings


def hidden_from(source: str) -> int:
    """The readers (GROUP, OTHERS) that cannot read the files[] source `source` on this host: the file (every file
    and directory of a directory source) lacks their read bit, or the directory that holds it their search bit
    (~/.ssh is 0700). Links are followed where the copy follows them (the source itself), not below it. What
    cannot be looked at counts as hidden from both."""
    try:
        hidden = _lacking(os.stat(os.path.dirname(os.path.abspath(source))).st_mode, read=False, search=True)
        info = os.stat(source)
        if not os.path.isdir(source):
            return hidden | _lacking(info.st_mode)
        for root, _directories, files in os.walk(source):
            hidden |= _lacking(os.stat(root).st_mode, search=True, read=True)
            for name in files:
                found = os.lstat(os.path.join(root, name))
                if not os.path.islink(os.path.join(root, name)):
                    hidden |= _lacking(found.st_mode)
            if hidden == GROUP | OTHERS:
                break
        return hidden
    except OSError:
        return GROUP | OTHERS


def _lacking(mode: int, *, read: bool = True, search: bool = False) -> int:
    hidden = 0
    for readers, read_bit, search_bit in ((GROUP, 0o040, 0o010), (OTHERS, 0o004, 0o001)):
        if (read and not mode & read_bit) or (search and not mode & search_bit):
            hidden |= readers
    return hidden


def _modes_of(source: str) -> str:
    """'mode 0600, in a directory of mode 0700': what hides it."""
    try:
        own = os.stat(source).st_mode & 0o7777
        directory = os.stat(os.path.dirname(os.path.abspath(source))).st_mode & 0o7777
    except OSError as exc:
        return f"cannot look at it: {exc.strerror}"
    return f"mode {own:04o}, in a directory of mode {directory:04o}"


def _host_problems(document: LocatedDocument, loaded: LoadedSpec, wrong: frozenset[str]) -> list[SpecProblem]:
    """The files[] sources and a local base image, on this host (the system recipe: _system_recipe). `wrong`: the top-level fields
    with problems of their own, whose stand-ins in `loaded` are not looked for."""
    spec = loaded.spec
    problems: list[SpecProblem] = []

    def add(loc: FieldPath, message: str, hint: str) -> None:
        pos = document.position_of(loc)
        problems.append(SpecProblem(document.file, pos.line, pos.column, _dotted(loc), message, hint))

    for index, item in _files_to_look_for(document, spec, wrong):
        problem = file_source_problem(item, str(loaded.directory.absolute()))
        if problem:
            add(("files", index, "src"), *problem)
    if spec.base.kind == "localimage" and "base" not in wrong:
        image = loaded.resolve_host_path(spec.base.ref)
        if not image.exists():
            add(("base",), f"local image {spec.base.ref!r} does not exist (resolved to {image})",
                "give the path of a .sif file or a sandbox directory, relative to the spec file")
        elif image.is_file() and image.suffix not in (".sif", ".simg", ".img"):
            add(("base",), f"{image} is a file but not a .sif image", "use a .sif file or a sandbox directory")
    return problems


def _system_recipe(document: LocatedDocument, spec: Spec, path: Path) -> tuple[SystemRecipe | None, SpecProblem | None]:
    """The recipe `system:` names, loaded as --system loads it (a name from recipes/, or a recipe file's path, read
    from the spec file's directory), else None and the problem to report where the host is checked."""
    pos = document.position_of(("system",))

    def problem(message: str, hint: str) -> tuple[None, SpecProblem]:
        return None, SpecProblem(document.file, pos.line, pos.column, "system", message, hint)

    known = available_recipes()
    if not is_recipe_path(spec.system):
        if spec.system in known:
            return load_recipe(spec.system), None
        close = difflib.get_close_matches(spec.system, known, n=1)
        return problem(f"no system recipe named {spec.system!r} (looked in {recipes_dir()})",
                       (f"did you mean {close[0]!r}? " if close else "") + f"known systems: {', '.join(known)}, or "
                       "a recipe file's path (system: ./mysite.yaml, read from the spec file's directory; "
                       "`envrun recipe draft -o mysite.yaml` writes one for this cluster)")
    directory = str(path.parent.absolute())
    file = recipe_reference(spec.system, directory)
    where = f"{spec.system!r} (resolved to {file}, from the spec file's directory)"
    fix = (f"correct the path (it is read from the spec file's directory {directory}), write the file there "
           f"(`envrun recipe draft -o {file}` drafts one on the cluster), or name a recipe: {', '.join(known)}")
    if not os.path.lexists(file):
        return problem(f"the recipe file {where} does not exist", fix)
    if os.path.isdir(file):
        return problem(f"the recipe file {where} is a directory", fix)
    if not os.path.isfile(file):  # a FIFO or a device would block or never end: not read
        return problem(f"the recipe file {where} is not a regular file" if os.path.exists(file)
                       else f"the recipe file {where} is a symbolic link to nothing", fix)
    try:
        return load_recipe(file), None
    except SpecError as exc:  # the YAML itself: its own located problem, in the recipe file
        first = exc.problems[0]
        return problem(f"{spec.system!r} is not a valid system recipe: {first.file}:{first.line}:{first.column}: "
                       f"{first.message}", first.hint or "fix the recipe file")
    except UsageError as exc:  # the recipe's fields, its name, or a file that cannot be read
        return problem(f"{spec.system!r} is not a valid system recipe: {exc.message}", exc.hint or "fix the recipe file")


def _files_to_look_for(document: LocatedDocument, spec: Spec, wrong: frozenset[str]) -> list[tuple[int, FileCopy]]:
    """(index, entry) of files[]: the spec's, or when an entry has a problem, each entry that is valid alone."""
    if "files" not in wrong:
        return list(enumerate(spec.files))
    written = document.data.get("files")
    found = []
    for index, item in enumerate(written if isinstance(written, list) else ()):
        try:
            found.append((index, FileCopy.model_validate(item)))
        except ValidationError:
            continue
    return found


# --- secrets a spec would bake into its image ---------------------------------------------------------------
# Every value of `env:` is written into the image's environment script, and the whole spec text into
# /.envbuild/spec.yaml, readable by everyone who can read the image file. A warning, not an error: the value may
# be a placeholder, and the user decides.

_ENV_FIX = ("leave it out of the spec and set it where the job runs: apptainer passes the host's environment "
            "into the container (export {name}=... before envrun, or in the job script, from a file only you can read)")
_VALUE_FIX = ("leave the credentials out of the spec: an index that needs them goes into the host's pip configuration "
              "(pip.conf, PIP_EXTRA_INDEX_URL), which builds use without writing it into the image, its log or a lock file")


def secret_warnings(document: LocatedDocument) -> list[SpecProblem]:
    """One located warning per value of the spec that looks like a secret (see envbuild.host.secrets)."""
    warnings = []
    for loc, name, value in _values(document.data, ()):
        reason = secret_reason(name, value)
        if reason is None:
            continue
        pos = document.position_of(loc)
        field = "".join(f"[{part}]" if isinstance(part, int) else (f".{part}" if i else str(part)) for i, part in enumerate(loc))
        baked = "the image's environment script and /.envbuild/spec.yaml" if loc[:1] == ("env",) else "/.envbuild/spec.yaml"
        fix = _ENV_FIX.format(name=name) if loc[:1] == ("env",) and name else _VALUE_FIX
        warnings.append(SpecProblem(document.file, pos.line, pos.column, field,
                                    f"this value {reason}: it would be written into {baked}, readable by anyone "
                                    "who can read the image", fix))
    return warnings


def _values(data: Any, loc: FieldPath) -> Iterator[tuple[FieldPath, str | None, str]]:
    """(where, variable name or None, text) of every scalar in the document; `env:` and `labels:` entries
    carry their key as the name."""
    if isinstance(data, dict):
        for key, value in data.items():
            named = len(loc) == 1 and loc[0] in ("env", "labels") and isinstance(key, str)
            if named and not isinstance(value, (dict, list)):
                yield (*loc, key), key, "" if value is None else str(value)
            else:
                yield from _values(value, (*loc, key))
    elif isinstance(data, list):
        for index, item in enumerate(data):
            yield from _values(item, (*loc, index))
    elif isinstance(data, str):
        yield loc, None, data
