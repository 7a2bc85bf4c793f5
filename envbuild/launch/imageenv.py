"""Whether the image's own environment can set $WITH_CONDA: where nothing can, envrun runs the program without
its container shim (envbuild.launch.shims), so the container starts the program itself instead of a /bin/sh
that then execs it (bench/envrun_latency.py: one shell fewer at every launch).

apptainer and singularity source the image's /.singularity.d/env/*.sh when the container starts (in name
order; %environment is 90-environment.sh, a Docker image's ENV is 10-docker2singularity.sh). LUMI's PyTorch
images set WITH_CONDA there (docs.lumi-supercomputer.eu/software/containers/singularity/#the-lumi-software-
stack-containers: `$WITH_CONDA` activates the conda env). envrun reads those scripts without starting a container
and answers "" only when none can set it: every script could be read, none mentions WITH_CONDA, and none sets
variables in a way a reading cannot follow (sourcing another file, eval, declare/typeset/read/printf -v,
export of a computed name). Anything else keeps the shim, with the reason for --explain: when envrun cannot
know, it runs the activation as before.

The scif app blocks apptainer writes into 95-apps.sh source /scif/apps/... only for `--app NAME`, which envrun
never passes; they are followed only where the image has no /scif at all (so the files cannot exist).

On every launch envrun asks this, so the answer is cached per (image path, size, mtime) like the runscript's
verdict (envbuild.host.usercache.cached_per_file); a miss reads the scripts through the SIF reader. Sandbox
directories are read directly, uncached.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from tree_sitter import Node, Parser

ENV_DIRECTORY = "/.singularity.d/env"
LIMIT = 256 * 1024  # environment scripts are small; a longer one is not followed (the shim stays)
VARIABLE = "WITH_CONDA"
# Commands that set variables whose names a reading of the script cannot see: what they run or read (another
# file, text built at run time) may set WITH_CONDA.
INDIRECT_COMMANDS = frozenset((".", "source", "eval", "read", "readarray", "mapfile", "printf", "let", "builtin",
                               "command", "getopts", "trap", "export", "declare", "typeset", "local", "readonly"))
_SCIF = "/scif/apps/"


def image_with_conda(image: str) -> str:
    """"" when the image's environment scripts cannot set $WITH_CONDA, else why they may (or why envrun cannot
    tell). Never raises: an image that cannot be read gets a reason, and its launch keeps the shim."""
    if os.path.isdir(image):
        return _directory_verdict(image)
    from envbuild.host.usercache import cached_per_file

    try:
        verdict: str = cached_per_file(image, "imageenv-1", _sif_verdict, _is_verdict)
    except OSError as exc:
        return f"the image's environment scripts could not be read ({exc.strerror or exc})"
    return verdict


def _is_verdict(value: object) -> bool:
    return type(value) is str


def _directory_verdict(root: str) -> str:
    # A link in the sandbox leads, inside the container, to the container's own path, and here to the host's:
    # what it names here says nothing of what the runtime sources.
    for part in (".singularity.d", ENV_DIRECTORY.lstrip("/")):
        if os.path.islink(os.path.join(root, part)):
            return f"/{part} is a link in the sandbox, which envrun does not follow on the host"
    directory = os.path.join(root, ENV_DIRECTORY.lstrip("/"))
    try:
        names = sorted(os.listdir(directory))
    except FileNotFoundError:
        names = []
    except OSError as exc:
        return f"{ENV_DIRECTORY} could not be listed ({exc.strerror or exc})"

    def read(name: str) -> str | None:
        if os.path.islink(os.path.join(directory, name)):
            return None  # leads elsewhere inside the container than here: unknown, as an unreadable script
        try:
            with open(os.path.join(directory, name), "rb") as handle:
                data = handle.read(LIMIT + 1)
        except IsADirectoryError:
            return ""  # not sourced: the runtime sources files only
        except OSError:
            return None
        return None if len(data) > LIMIT else data.decode("utf-8", "replace")

    return classify_environment(names, read, has_scif=os.path.lexists(os.path.join(root, "scif")))


def _sif_verdict(image: str) -> str:
    from envbuild.inventory.image import open_image
    from envbuild.shared.errors import ImageFormatError

    try:
        with open_image(image) as opened:
            tree = opened.tree
            entries = tree.children(ENV_DIRECTORY) or {}

            def read(name: str) -> str | None:
                if entries.get(name) == "dir":
                    return ""
                data = tree.read(f"{ENV_DIRECTORY}/{name}", LIMIT + 1)
                return None if data is None or len(data) > LIMIT else data.decode("utf-8", "replace")

            return classify_environment(sorted(entries), read, has_scif="scif" in (tree.children("/") or {}))
    except (ImageFormatError, OSError, ValueError) as exc:
        return f"the image's environment scripts could not be read ({exc})"


def classify_environment(names: list[str], read: Callable[[str], str | None], *, has_scif: bool) -> str:
    """The verdict for the scripts `names` in /.singularity.d/env (`read(name)` gives one's text, None when it
    cannot be read or is too long): "" when none can set $WITH_CONDA, else the first reason found."""
    from envbuild.shared.terminaltext import printable  # reasons name the image's files: printed by --explain

    for name in names:
        if not name.endswith(".sh"):
            continue  # the runtime sources *.sh only
        path = f"{ENV_DIRECTORY}/{name}"
        text = read(name)
        if text is None:
            return printable(f"the image's {path} could not be read whole")
        reason = script_may_set(text, has_scif=has_scif)
        if reason:
            return printable(f"the image's {path} {reason}")
    return ""


def script_may_set(text: str, *, has_scif: bool) -> str:
    """Why one environment script may set $WITH_CONDA ("mentions WITH_CONDA", "runs `eval` (line 4)"), "" when it
    cannot. Read with bash's grammar (tree-sitter-bash, as envrun sbatch --check reads job scripts); anything
    it cannot follow counts: a parse error, a command whose name is computed, a command in INDIRECT_COMMANDS, a
    declaration (export, declare, local, readonly) of a name that is computed."""
    if VARIABLE in text:
        return f"mentions {VARIABLE}"
    root = _parser().parse(text.encode("utf-8", "surrogatepass")).root_node
    if root.has_error:
        return f"is not bash that envrun can read (near line {_first_error_line(root)})"
    pending = [root]
    while pending:
        node = pending.pop()
        pending.extend(node.children)
        line = node.start_point[0] + 1
        if node.type == "command":
            name = node.child_by_field_name("name")
            words = [child for child in (name.children if name is not None else []) if child.is_named]
            if name is None or len(words) != 1 or words[0].type != "word":
                return f"runs a command whose name is computed (line {line})"
            command = _text(words[0]).replace("\\", "")  # bash removes the quoting: `\eval` and `e\val` run eval
            if command not in INDIRECT_COMMANDS:
                continue
            arguments = node.children_by_field_name("argument")
            if (command in (".", "source") and not has_scif and arguments
                    and _text(arguments[0]).strip("\"'").startswith(_SCIF)):
                continue  # apptainer's scif block (95-apps.sh), for `--app` only, and this image has no /scif
            return f"runs `{command}` (line {line}), which may set variables a reading cannot see"
        if node.type == "declaration_command":
            for child in node.children[1:]:
                if child.type in ("variable_assignment", "variable_name") or (
                        child.type == "word" and _text(child).startswith("-")):
                    continue
                return f"runs `{_text(node.children[0])}` with a name it computes (line {line})"
    return ""


_PARSER: list[Parser] = []


def _parser() -> Parser:
    """tree-sitter's parser for bash, made once (imported here only: a cached verdict needs none)."""
    if not _PARSER:
        import tree_sitter_bash
        from tree_sitter import Language, Parser

        _PARSER.append(Parser(Language(tree_sitter_bash.language())))
    return _PARSER[0]


def _text(node: Node) -> str:
    return (node.text or b"").decode("utf-8", "replace")


def _first_error_line(root: Node) -> int:
    pending = [root]
    while pending:
        node = pending.pop()
        if node.type == "ERROR" or node.is_missing:
            return node.start_point[0] + 1
        pending.extend(reversed(node.children))
    return root.start_point[0] + 1
