"""Images whose runscript sets up their environment, honoured the way `singularity run` would.

The LUMI AI Factory (LAIF) images are started with `singularity run IMG COMMAND...` in LUMI's own examples:
their runscript prepares the process before it execs the command (laifs-container-recipes, containerfiles/
multi/Rocm_Multipurpose: an OCI ENTRYPOINT /opt/oci-entrypoint.sh that sets FI_HMEM_DISABLE_P2P for jobs
without GPUs, ROCR_VISIBLE_DEVICES=$SLURM_LOCALID when ROCR_USE_SLURM_LOCALID=1, HIP_VISIBLE_DEVICES, then
`exec "$@"`; releases before 20260513 did the same in a SIF %runscript). `apptainer exec` skips all of it.

envrun reads the image's /.singularity.d/runscript without starting a container and decides:

  run   the runscript (or the OCI entrypoint it calls) does something and then execs its arguments
        (`exec "$@"`): envrun starts the image with `run --no-eval`, so the runscript wraps envrun's own
        shims exactly as it wraps a command given to `singularity run`. --no-eval matters: a runscript that
        apptainer/singularity generated from an OCI image otherwise joins the arguments into a string and
        `eval`s it (sylabs/singularity#704), which would break any argument with $, quotes or backslashes.
  exec  no runscript, apptainer's placeholder, or a runscript that does not run the command it is given
        (a fixed program, an entrypoint such as `python`): `exec` as before; --explain says why.

On every launch envrun runs this, so the verdict is cached per (image path, size, mtime) like the overlay
records (envbuild.host.usercache.cached_per_file): a cache hit costs a stat and a small read; a miss reads two small files
through the SIF reader (whose imports alone would weigh on every launch). Sandbox directories are read directly, uncached.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

RUNSCRIPT = "/.singularity.d/runscript"
LIMIT = 64 * 1024  # runscripts are a few hundred bytes; anything longer is not read past this

# Variables a runscript reads to pick GPUs by Slurm task: the LAIF entrypoint sets ROCR_VISIBLE_DEVICES to
# $SLURM_LOCALID when ROCR_USE_SLURM_LOCALID=1. envrun decides per task which GPUs a task sees (one per rank
# with `srun python`, all of the node's for a torchrun launcher, several for a task that owns several), so it
# removes these switches when it honours a runscript: with them a torchrun launcher (SLURM_LOCALID 0) and
# every rank it starts would see GPU 0 only.
GPU_SWITCHES = ("ROCR_USE_SLURM_LOCALID",)

_PLACEHOLDER = "There is no runscript defined for this container"  # apptainer's runscript for images without one


def image_runscript(image: str) -> tuple[str, str] | None:
    """("run", what the runscript does) when envrun should start `image` with `run`, ("exec", why not) for a
    runscript it does not use, None when the image has none worth a word. Never raises: an image whose files
    cannot be read is left to the container runtime, which says what is wrong with it."""
    if os.path.isdir(image):
        return classify_runscript(_read_dir(image, RUNSCRIPT), lambda path: _read_dir(image, path))
    from envbuild.host.usercache import cached_per_file

    try:
        return cached_per_file(image, "runscripts-1", _read_sif_verdict, _is_verdict)
    except OSError:
        return None


def _is_verdict(value: object) -> bool:
    """Whether a cached value has the shape _read_sif_verdict gives."""
    return value is None or (type(value) is tuple and len(value) == 2 and all(type(part) is str for part in value))


def _read_dir(root: str, path: str) -> str | None:
    try:
        with open(os.path.join(root, path.lstrip("/")), "rb") as handle:
            return handle.read(LIMIT).decode("utf-8", "replace")
    except OSError:
        return None


def _read_sif_verdict(image: str) -> tuple[str, str] | None:
    from envbuild.inventory.image import open_image
    from envbuild.shared.errors import ImageFormatError

    try:
        with open_image(image) as opened:
            def read(path: str) -> str | None:
                data = opened.tree.read(path, LIMIT)
                return None if data is None else data.decode("utf-8", "replace")

            return classify_runscript(read(RUNSCRIPT), read)
    except (ImageFormatError, OSError, ValueError):
        return None


def classify_runscript(text: str | None, read: Callable[[str], str | None]) -> tuple[str, str] | None:
    """The verdict for a runscript's text; `read(path)` gives another file of the image (the OCI entrypoint).
    Its words come from the image (paths, an entrypoint), so control characters in them are escaped: the
    verdict is printed by --explain and written into the comments of scripts."""
    from envbuild.shared.terminaltext import printable  # the verdict is cached: not on envrun's every launch

    verdict = _verdict(text, read)
    return None if verdict is None else (verdict[0], printable(verdict[1]))


def _verdict(text: str | None, read: Callable[[str], str | None]) -> tuple[str, str] | None:
    if not text or _PLACEHOLDER in text:
        return None
    entrypoint = _oci_entrypoint(text)
    if entrypoint is not None:  # generated by apptainer/singularity from an OCI image's ENTRYPOINT and CMD
        if not entrypoint:
            return None  # no ENTRYPOINT: `run` with arguments runs just the arguments, as `exec` does
        script = read(entrypoint[0]) if entrypoint[0].startswith("/") else None
        if len(entrypoint) == 1 and script is not None and _passes_arguments_on(script):
            return "run", f"its OCI entrypoint {entrypoint[0]} {_what_it_does(script)}, then runs the command it is given"
        return "exec", (f"its runscript starts the OCI entrypoint {' '.join(entrypoint)}, which does not run the command it "
                        "is given as a command (no `exec \"$@\"`)")
    if _passes_arguments_on(text):
        return "run", f"its runscript {_what_it_does(text)}, then runs the command it is given"
    return "exec", "its runscript does not run the command it is given (no `exec \"$@\"`), so envrun does not use it"


def _lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]


def _passes_arguments_on(text: str) -> bool:
    """It ends by exec'ing its arguments, after doing something else first (a bare `exec "$@"` changes nothing)."""
    lines = _lines(text)
    execs = [i for i, line in enumerate(lines) if line in ('exec "$@"', "exec \"${@}\"")]
    return bool(execs) and execs[-1] > 0


def _what_it_does(text: str) -> str:
    """A short account for --explain: the variables it exports and the environments it activates."""
    names: list[str] = []
    activates: list[str] = []
    for line in _lines(text):
        for part in line.replace(";", "\n").splitlines():
            words = part.split()
            if words[:1] == ["export"]:
                names += [word.split("=", 1)[0] for word in words[1:] if word.split("=", 1)[0].isidentifier()]
            elif words[:1] in (["."], ["source"]) and len(words) > 1 and words[1].endswith("/bin/activate"):
                activates.append(words[1][: -len("/bin/activate")])
    done = [f"activates {', '.join(dict.fromkeys(activates))}"] if activates else []
    if names:
        done.append(f"sets {', '.join(dict.fromkeys(names))}")
    return " and ".join(done) or "sets up the environment"


def _oci_entrypoint(text: str) -> list[str] | None:
    """The words of OCI_ENTRYPOINT in a runscript generated from an OCI image (`OCI_ENTRYPOINT='"/a" "-b"'`),
    None when the runscript is not such a one."""
    for line in text.splitlines():
        if line.startswith("OCI_ENTRYPOINT="):
            value = line[len("OCI_ENTRYPOINT="):].strip()
            if len(value) >= 2 and value[0] == value[-1] == "'":
                value = value[1:-1]
            value = value.strip()
            if not value:
                return []
            return [word.strip('"') for word in value.split('" "')]
    return None
