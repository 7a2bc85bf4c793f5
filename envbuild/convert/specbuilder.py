"""What the importers of every format share: the spec builder that collects a definition file's or a
Dockerfile's parts in order, the pip installs it takes into python.packages, bases, labels and files.

Import reads the build file instruction by instruction, keeping line numbers, and maps what a spec can say
(base, pip installs, other commands, environment, labels, files, tests); everything else is returned as
a note, written as a comment list at the top of the spec, never dropped silently. spython's parsers
are not used for the reading itself: its SingularityParser accepts only `Bootstrap: docker` and turns
%test into echo lines, its DockerParser sends USER/SHELL and continuation lines to the install list, and
neither keeps line numbers. spython's ENV splitter is used for Dockerfile ENV lines, and the tests parse
every exported file back with spython. Export renders the text itself for the same reason (spython's
SingularityWriter writes `Bootstrap: docker` only and always adds a runscript).

Each format's reading and writing is in its own module, registered in envbuild.convert.formats.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import yaml
from packaging.requirements import InvalidRequirement, Requirement

from envbuild.convert.buildargs import build_file_error
from envbuild.convert.shellscript import script_lines, split_words
from envbuild.envspec.specmodel import VENV_PREFIX, src_leaves_spec_dir
from envbuild.shared.errors import UsageError

if TYPE_CHECKING:
    from envbuild.convert.envassign import EnvEntry

# pip install options that change nothing a spec records: dropped without a note.
HARMLESS_FLAGS = {"--no-cache-dir", "-U", "--upgrade", "-q", "--quiet", "-v", "--verbose", "--no-input",
                   "--disable-pip-version-check", "--break-system-packages", "--no-warn-script-location", "--compile"}
HARMLESS_WITH_VALUE = {"--progress-bar", "--root-user-action", "--upgrade-strategy"}
PIP_INSTALL = re.compile(r"^(?:sudo\s+)?(?:(?P<py>\S*python[0-9.]*)\s+-m\s+pip|\S*pip[0-9.]*)\s+install\s+(?P<args>.*)$", re.S)
VENV_LINE = re.compile(r"^(?P<py>\S+)\s+-m\s+venv\s+(?P<over>--system-site-packages\s+)?" + re.escape(VENV_PREFIX) + r"/?$")
# The line an export writes where the packages go into the base's own Python (envbuild.convert.specexport).
TARGET_LINE = re.compile(r"^#\s*envbuild python\.target: (?P<target>base)\b")
# (?<!\s): the blanks before the # are tried from the first of them only (from each, a long run of blanks was
# read again: quadratic time).
VARIANT_COMMENT = re.compile(r"(?<!\s)\s+#\s*pytorch variant (?P<variant>\S+)\s*$")
SHORTHANDS = ("transformers", "lightning")


@dataclass
class ImportResult:
    """The spec read from a definition file or a Dockerfile (as a YAML-ready mapping) and what could not be carried into it."""

    spec: dict[str, Any]
    notes: list[str] = field(default_factory=list)

    def render(self, source: str) -> str:
        head = [f"# Imported by envbuild import from {source}; review it, then: envbuild build <this file>"]
        if self.notes:
            head.append("# not imported, or kept in post as written (a spec cannot express these; rewrite them by hand if you need them):")
            head += [f"#   {note}" for note in self.notes]
        return "\n".join(head) + "\n" + yaml.dump(self.spec, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=1000)


class _Dumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):  # type: ignore[misc]
    """libyaml's emitter where PyYAML has it: the Python one takes seconds per megabyte of a here-document in post
    (the same text, but for U+0085, which libyaml escapes)."""


def _str_representer(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str_representer)


class SpecBuilder:
    """What both readers collect, in the order of the file read."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.base: str | None = None
        self.base_extra: dict[str, Any] = {}
        self.interpreter: str | None = None
        self.requirements: list[str] = []
        self.pytorch: dict[str, Any] | None = None
        self.post: list[str] = []
        self.env: dict[str, EnvEntry] = {}
        self.env_shell: list[str] = []  # %environment lines kept as shell, in their order (after env)
        self.labels: dict[str, str] = {}
        self.files: list[dict[str, object]] = []
        self.tests: list[str] = []
        self.notes: list[str] = []
        self.post_started = False  # a post command came before: later pip installs may depend on it
        self.target: str | None = None  # python.target read from an exported file's venv line
        self.pip_into_base = False  # the file pip-installs into the Python of a base that is not a plain OS

    def note(self, line: int | None, text: str) -> None:
        self.notes.append(f"line {line}: {text}" if line else text)

    def shell(self, line: int, script: str) -> None:
        """A shell script (a %post block, a RUN): its pip installs become packages, the rest post."""
        kept: list[str] = []
        for number, logical, verbatim in script_lines(script, line):  # notes at each line's own number
            marked = TARGET_LINE.match(logical.strip())
            if marked:  # an exported file's python.target (one without a venv line cannot say it otherwise)
                self.target = marked["target"]
                continue
            rest = logical if verbatim else self._take_pip(number, logical)
            if rest:
                kept.append(rest)
        if kept:
            self.post.append("\n".join(kept))

    def _take_pip(self, line: int, logical: str) -> str:
        venv = VENV_LINE.match(logical.strip())
        if venv:  # envbuild's own venv (an exported file): implied by the spec
            if venv["py"] != "python3":
                self.interpreter = venv["py"]
            self.target = "venv-over-base" if venv["over"] else "envbuild-venv"
            return ""
        variant = VARIANT_COMMENT.search(logical)
        if variant:
            logical = logical[: variant.start()]
        segments = [s.strip() for s in logical.split("&&")]  # not a regex: \s*&& was quadratic on long blanks
        kept = []
        for segment in segments:
            if not self._pip_segment(line, segment, variant["variant"] if variant else None):
                kept.append(segment)
                self.post_started = self.post_started or bool(segment)
        if len(kept) == len(segments):
            return logical
        return " && ".join(s for s in kept if s)

    def _pip_segment(self, line: int, segment: str, variant: str | None) -> bool:
        """True when `segment` is a pip install taken into python.packages."""
        match = PIP_INSTALL.match(segment)
        if not match:
            return False
        try:
            words = split_words(match["args"], comments=True)
        except ValueError:
            return False
        requirements, index_url, unknown = [], None, []
        it = iter(words)
        for word in it:
            if word in HARMLESS_FLAGS:
                continue
            if word in HARMLESS_WITH_VALUE:
                next(it, None)
                continue
            if word.split("=", 1)[0] in HARMLESS_WITH_VALUE:
                continue
            if word in ("--index-url", "--extra-index-url", "-i") and variant:
                index_url = next(it, None)
                continue
            if word.startswith("-") or "$" in word or "/" in word:
                unknown.append(word)
                continue
            try:
                Requirement(word)
            except InvalidRequirement:
                unknown.append(word)
                continue
            requirements.append(word)
        if unknown or not requirements:
            self.note(line, f"kept in post: {segment[:100]} (pip options or arguments a spec cannot express: "
                            f"{' '.join(unknown) or 'no requirement'}; list the packages under python.packages)")
            return False
        held = self._held_in_post(match["py"] or "")
        if held:
            self.note(line, f"kept in post in its place: {segment[:100]} ({held})")
            return False
        if variant:
            torch = [r for r in requirements if Requirement(r).name == "torch"]
            version = str(Requirement(torch[0]).specifier).removeprefix("==") if torch else ""
            if torch and re.match(r"^\d[\w.+]*$", version):
                self.pytorch = {"version": version, "variant": variant}
                if index_url and not is_official_index(index_url, variant):
                    self.pytorch["index_url"] = index_url
                extras = [r for r in requirements if r is not torch[0]]
                if extras:
                    self.pytorch["extras"] = extras
                return True
        self.requirements += requirements
        return True

    def _held_in_post(self, python: str) -> str | None:
        """Why a pip install must stay a post command, in its order, or None when python.packages means the
        same: those are installed into a new venv before any post command, so only an install that nothing
        earlier prepares, on a base whose Python the venv does not hide, may move there."""
        if python.startswith(VENV_PREFIX + "/"):
            return None  # envbuild's own venv (an exported file): what python.packages makes
        into_base = not plain_os_base(self.base or "")
        # The file installs into the base's Python: the spec does too (python.target: base), whether the install
        # moves to python.packages or stays in post, where the base's PATH is left as it is.
        self.pip_into_base = self.pip_into_base or into_base
        if self.post_started or self.post:
            return ("commands before it may prepare it (a Python, a requirements file, a library); "
                    "python.packages would be installed before them")
        if into_base and python not in ("", "python", "python3"):
            return (f"it names its Python ({python}); python.packages go into the Python first on the base's PATH, "
                    "which may be another")
        return None

    def python_target(self) -> str | None:
        """python.target for the import, None for envbuild's own venv: the base's own Python where the base
        carries a Python environment (a framework image by its name, or any base that is not a plain OS when the
        file pip-installs into it), so the packages go where the original put them; the venv line of an exported
        file says it otherwise."""
        if self.target:
            return None if self.target == "envbuild-venv" else self.target
        base = self.base or ""
        if plain_os_base(base):
            return None
        if framework_base(base) or self.pip_into_base:
            return "base"
        return None

    def result(self) -> ImportResult:
        if self.base is None:
            raise UsageError("the definition file or Dockerfile names no base image (no Bootstrap/From header, no FROM line)",
                             "a spec needs a base; add one to the file or write the spec by hand")
        spec: dict[str, Any] = {"name": self.name, "system": "local"}
        spec["base"] = {**base_mapping(self.base), **self.base_extra} if self.base_extra else self.base
        python: dict[str, Any] = {}
        target = self.python_target()
        if target:
            python["target"] = target
        if self.interpreter:
            python["interpreter"] = self.interpreter
        if self.pytorch:
            python["pytorch"] = self.pytorch
        packages = []
        for text in self.requirements:
            req = Requirement(text)
            if req.name in SHORTHANDS and req.name not in python and not req.extras and not req.marker:
                spec_text = text.strip()[len(req.name):].strip()
                python[req.name] = spec_text.removeprefix("==") if re.match(r"^==[\w.]+$", spec_text) else spec_text or True
            else:
                packages.append(text)
        if packages:
            python["packages"] = packages
        order = ["target", "interpreter", "pytorch", *SHORTHANDS, "packages"]
        if python:
            spec["python"] = {key: python[key] for key in order if key in python}
        env_shell = "\n".join(self.env_shell)
        for key, value in (("env", self.env), ("env_shell", env_shell), ("labels", self.labels), ("files", self.files),
                           ("post", self.post), ("tests", self.tests)):
            if value:
                spec[key] = value
        return ImportResult(spec, self.notes)


# Images known to hold an operating system and at most a plain Python (no conda, no venv, no framework):
# a venv made from their Python hides nothing the imported file's pip install would have seen.
_PLAIN_OS_IMAGE = re.compile(r"^docker://(?:docker\.io/)?(?:library/)?(?:debian|ubuntu|rockylinux|almalinux|"
                             r"centos|fedora|opensuse/leap|python)(?::[\w.-]+)?$")


# Images known to carry a Python environment of their own (a framework, conda, a venv): NGC, PyTorch, TensorFlow,
# JAX, conda/mamba, ROCm's and the LUMI (AI Factory) images, by the words their names are made of.
_FRAMEWORK_IMAGE = re.compile(r"(?:^|[/_:.-])(?:pytorch|torch|tensorflow|jax|nemo|rapids|miniconda\d*|anaconda\d*|"
                              r"conda|miniforge\d*|mambaforge|micromamba|lumi|laifs|lumiaifactory|multitorch)"
                              r"(?=$|[/_:.0-9-])", re.I)


def framework_base(base: str) -> bool:
    """Whether the import's base is known by its name to carry a Python environment (see _FRAMEWORK_IMAGE)."""
    return not plain_os_base(base) and bool(_FRAMEWORK_IMAGE.search(base.split(":", 1)[-1]))


def plain_os_base(base: str) -> bool:
    """Whether the import's base is provably without a Python environment of its own."""
    return base.startswith("debootstrap:") or bool(_PLAIN_OS_IMAGE.match(base))


def is_official_index(url: str, variant: str) -> bool:
    tag = "cu" + variant[4:] if variant.startswith("cuda") else variant
    return url.rstrip("/") == f"https://download.pytorch.org/whl/{tag}"


def base_mapping(base: str) -> dict[str, Any]:
    kind, ref = base.split(":", 1)
    return {kind: ref}


def add_label(builder: SpecBuilder, number: int, key: str, value: str) -> None:
    if key.startswith("org.envbuild."):
        builder.note(number, f"label {key} (envbuild writes org.envbuild.* labels itself)")
    else:
        builder.labels[key] = value


def add_file(builder: SpecBuilder, number: int, src: str, dest: str, src_prefix: str, mode: str | None = None, *,
             build_file: str, context: str, written: str) -> None:
    """A COPY/ADD source or a %files line of `build_file` as a files[] entry. A source outside the build context
    (`context`: the Dockerfile's or the definition file's directory) is refused at its line, as Docker refuses
    it: import never turns a build file into a spec that copies the user's other files (~/.ssh) into an image,
    and never writes allow_outside_spec_dir."""
    if src.startswith(("http://", "https://")):
        builder.note(number, f"file {src} -> {dest} (files[].src is one local path: no URLs or wildcards)")
        return
    outside = _outside_context(src)
    if outside:
        raise build_file_error(build_file, number, f"{written}: the source {src!r} {outside}, outside the build "
                               f"context ({context}); Docker never copies from outside its build context, and "
                               "envbuild import does not turn a Dockerfile or definition file into a spec that "
                               "copies other files of this host into an image",
                               f"copy what the image needs into {context} and name it relative to it; a key or "
                               "another secret does not belong in an image at all: bind it at run time (envrun --bind)")
    if not dest.startswith("/"):
        builder.note(number, f"file {src} -> {dest} (the destination must be an absolute path)")
        return
    if any(ch in src for ch in "*?["):
        builder.note(number, f"file {src} -> {dest} (files[].src is one local path: no URLs or wildcards)")
        return
    path = posixpath.normpath(posixpath.join(src_prefix, src)) if src_prefix else src
    if src_leaves_spec_dir(path):
        raise build_file_error(build_file, number, f"{written}: the spec is written outside {context}, so this "
                               f"source ({path} from the spec) would lie outside the spec's directory, where a spec "
                               "copies files from", f"write the spec (-o) into {context} or a directory above it")
    entry: dict[str, object] = {"src": path, "dest": dest}
    if mode:
        entry["mode"] = mode
    builder.files.append(entry)


def _outside_context(src: str) -> str | None:
    """How `src`, as the imported file writes it, leaves that file's directory, or None when it stays inside."""
    if src.startswith("~"):
        return "starts with ~ (a home directory)"
    if src.startswith("/"):
        return "is an absolute path"
    if posixpath.normpath(src).split("/")[0] == "..":
        return "climbs out of it with .."
    return None
