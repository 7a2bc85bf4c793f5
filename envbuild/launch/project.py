"""Which environment envrun runs in when the command line does not say, so that `envrun srun torchrun
train.py` works verbatim in a project directory. The first of these that names an image or overlays wins:

1. the command line: --image, --overlay;
2. $ENVRUN_IMAGE, with $ENVRUN_OVERLAYS (colon-separated);
3. `image:` / `overlays:` in the nearest envrun.yaml, in the working directory or a parent (paths relative
   to the file, the real one when it is found through a link; `envbuild build` writes it, see
   envbuild.launch.projectfile);
4. the one *.sif in the working directory.

Whichever wins, the nearest envrun.yaml's `binds:` and `env:` apply on top of the user's config (the
project's env wins; envbuild.launch.launchplan passes env into the container only). The envrun.yaml of 3. and
the *.sif of 4. are found, not named, so they are obeyed only when they are the user's to obey
(envbuild.launch.trust: owner, who may write them, where the walk up stops); one that is not is ignored
with a warning. The project file is judged and read through one descriptor (envbuild.launch.trust.walk_up):
what is obeyed is what was judged. Light on purpose (envrun's start-up path): a few stat calls, and the
project file is validated only when it changed (envbuild.launch.config.read_settings).
"""

from __future__ import annotations

import os

from envbuild.shared.errors import UsageError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from typing import Any

    from envbuild.launch.trust import Ignored, TrustedDirs, Walk

PROJECT_FILE = "envrun.yaml"


class Environment:
    """What to run in (absolute paths) and why; `project` is the nearest envrun.yaml's data, if any."""

    __slots__ = ("image", "overlays", "project", "project_dir", "project_file", "source")

    def __init__(self, image: str | None, overlays: tuple[str, ...], source: str,
                 project_file: str | None = None, project: Mapping[str, Any] | None = None,
                 project_dir: str = "") -> None:
        self.image = image  # None: only overlays were named; their record says which base they were made for
        self.overlays = overlays  # bottom first
        self.source = source  # where they came from, for --explain and error messages
        self.project_file = project_file
        self.project = project
        # The real directory of the project file (after links): its relative paths lead from there.
        self.project_dir = project_dir or (os.path.dirname(project_file) if project_file else "")


def find_project_file(cwd: str, environ: Mapping[str, str] | None = None, trusted: TrustedDirs | None = None) -> Walk:
    """The nearest envrun.yaml in `cwd` or a parent that envrun may obey, every path checked on the way,
    and those ignored (envbuild.launch.trust)."""
    from envbuild.launch.trust import walk_up

    return walk_up(cwd, PROJECT_FILE, trusted or trusted_dirs(os.environ if environ is None else environ))


def find_environment(*, image: str | None, overlays: Sequence[str], environ: Mapping[str, str], cwd: str,
                     warn: Callable[[Ignored], None] | None = None) -> Environment:
    """The environment to run in (see the module's docstring for the order). UsageError when nothing names
    one, listing every place looked at. Each file found and ignored (envbuild.launch.trust.Ignored) is
    reported through `warn` (default: a line on stderr)."""
    from envbuild.launch.config import read_settings
    from envbuild.launch.trust import Ignored, untrusted_because

    warn = warn or _warn
    trusted = trusted_dirs(environ)
    walk = find_project_file(cwd, environ, trusted)
    for ignored in walk.ignored:
        warn(ignored)
    project_file = walk.found
    project = read_settings(project_file, project=True, content=walk.content) if project_file else None
    found = Environment(None, (), "", project_file, project, walk.base)
    if image or overlays:
        found.image, found.overlays, found.source = _absolute(image, cwd), _all_absolute(overlays, cwd), "the command line"
        return found
    env_image, env_overlays = environ.get("ENVRUN_IMAGE", ""), environ.get("ENVRUN_OVERLAYS", "")
    if env_image or env_overlays:
        found.image, found.source = _absolute(env_image or None, cwd), "$ENVRUN_IMAGE" if env_image else "$ENVRUN_OVERLAYS"
        found.overlays = _all_absolute([p for p in env_overlays.split(":") if p], cwd)
        return found
    if project_file and project and (project.get("image") or project.get("overlays")):
        base = found.project_dir
        found.image, found.overlays = _absolute(project.get("image"), base), _all_absolute(project.get("overlays", ()), base)
        found.source = project_file
        return found
    sifs = sorted(name for name in _entries(cwd) if name.endswith(".sif") and os.path.isfile(os.path.join(cwd, name)))
    if len(sifs) == 1:
        path = os.path.join(os.path.abspath(cwd), sifs[0])
        why = untrusted_because(path, trusted=trusted)  # a link and where it leads, as for envrun.yaml
        if why and trusted.covers(os.path.abspath(cwd)):
            why = None
        if why is None:
            found.image, found.source = path, f"the only .sif in {cwd}"
            return found
        walk.ignored.append(Ignored(path, why))
        warn(walk.ignored[-1])
    if len(sifs) > 1:
        raise UsageError(f"no image given, and {cwd} holds {len(sifs)} images: {', '.join(sifs)}",
                         f"pick one with --image (e.g. --image {sifs[0]}), or name it in {PROJECT_FILE} (image: {sifs[0]})")
    raise UsageError("no image to run in; envrun looked at:\n" + "\n".join(_looked_at(walk, cwd)),
                     f"pass --image IMG.sif (and --overlay ENV.sqsh), set ENVRUN_IMAGE, put `image: IMG.sif` in {PROJECT_FILE} "
                     "here (`envbuild build` writes it when it builds in this directory), or run envrun where the image is")


def _looked_at(walk: Walk, cwd: str) -> list[str]:
    """Every place looked at for the "no image" message: what each held, and why envrun ignored a file."""
    why = {ignored.path: ignored.why for ignored in walk.ignored}
    looked = ["  --image / --overlay: not given", "  $ENVRUN_IMAGE, $ENVRUN_OVERLAYS: not set"]
    for path in walk.checked:
        state = "names no image" if path == walk.found else f"ignored: {why[path]}" if path in why else "absent"
        looked.append(f"  {path}: {state}")
    if walk.stopped:
        looked.append(f"  (no parent looked at: {walk.stopped})")
    sifs = [path for path in why if path.endswith(".sif")]
    looked += [f"  {path}: ignored: {why[path]}" for path in sifs] or [f"  {os.path.join(os.path.abspath(cwd), '*.sif')}: none"]
    return looked


def trusted_dirs(environ: Mapping[str, str]) -> TrustedDirs:
    """$ENVRUN_TRUST_DIR, then `trusted_dirs` of the user's own config (read only when a check fails)."""
    from envbuild.launch.trust import TrustedDirs

    def from_config() -> list[str]:
        from envbuild.launch.config import read_user_settings

        return list(read_user_settings(environ).get("trusted_dirs") or ())

    return TrustedDirs(environ, from_config)


def _warn(ignored: Ignored) -> None:
    import sys

    sys.stderr.write(f"envrun: warning: {ignored.warning()}\n")


def project_settings(environment: Environment, system: str) -> tuple[tuple[str, ...], dict[str, str]]:
    """(binds, env) of the nearest envrun.yaml for `system`, bind sources made absolute against its directory."""
    from envbuild.launch.config import settings_for

    if not environment.project or not environment.project_file:
        return (), {}
    binds, env = settings_for(environment.project, system)
    base = environment.project_dir
    return tuple(_absolute_bind(bind, base) for bind in binds), env


def _absolute(path: str | None, base: str) -> str | None:
    if not path:
        return None
    return os.path.normpath(os.path.join(base, os.path.expanduser(path)))


def _all_absolute(paths: Sequence[str], base: str) -> tuple[str, ...]:
    return tuple(os.path.normpath(os.path.join(base, os.path.expanduser(p))) for p in paths)


def _absolute_bind(bind: str, base: str) -> str:
    source, colon, rest = bind.partition(":")
    return os.path.normpath(os.path.join(base, os.path.expanduser(source))) + colon + rest


def _entries(directory: str) -> list[str]:
    try:
        return os.listdir(directory)
    except OSError:
        return []


def image_and_overlays(environment: Environment, force: bool) -> tuple[str, tuple[tuple[str, str], ...], list[str], list[str]]:
    """The image, the overlays as (path, mount), warnings and notes. Overlays are read and checked against
    the image only when there are any: the plain path stays free of the squashfs reader and hashlib."""
    image, source = environment.image, environment.source
    notes = [f"image{' and overlays' if environment.overlays else ''} from {source}"]
    if not environment.overlays:
        return require_image(image, source), (), [], notes
    from envbuild.launch.overlays import check_overlays, read_overlays

    overlays = read_overlays(environment.overlays)
    if image is None:  # only overlays named: the base the bottom one was built for
        image = (overlays[0].record.get("base") or {}).get("path")
        if not image or not os.path.exists(image):
            raise UsageError(f"no image given for overlay {overlays[0].path}, and the base it was built for "
                             f"({image or 'not recorded'}) is not here", "pass --image BASE.sif")
        notes.append(f"image {image}: the base overlay {overlays[0].path} was built for")
    require_image(image, source)
    warnings, checked = check_overlays(overlays, image, force=force)
    return image, tuple((o.path, o.mount) for o in overlays), warnings, notes + checked


def require_image(image: str | None, source: str) -> str:
    if not image or not os.path.exists(image):
        named = "" if source == "the command line" else f" (named by {source})"
        raise UsageError(f"image {image} does not exist{named}", "build it with `envbuild build SPEC -o IMG.sif` or fix the path")
    return image
