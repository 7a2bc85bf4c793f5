"""`--stage SRC`: data copied or extracted once per node to node-local storage before training.

`describe_source` looks at a source on disk (an executor: sizes, archive listings); everything else is pure:
the sources become shell lines of the batch script that run one task per node. Each node extracts into a
private temporary name and renames it into place, so a node-local directory that is in fact shared (the
namespaced test cluster, a misconfigured site) ends up with one complete copy, never a mix.

The training command sees the first staged path as $ENVRUN_STAGED (later ones as $ENVRUN_STAGED_2, ...),
or through `{staged}` / `{staged:2}` written in its arguments.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from shlex import quote

from envbuild.shared.errors import UsageError
from envbuild.shared.shelltext import refuse_control, shown

TAR_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz", ".tar.zst", ".tzst")
GB = 1e9
_VARIABLE = re.compile(r"\$(?:\{[A-Za-z_][A-Za-z0-9_]*\}|[A-Za-z_][A-Za-z0-9_]*)")


@dataclass(frozen=True)
class StageSource:
    path: str  # absolute
    kind: str  # "dir", "tar", "zip" or "file"
    name: str  # its name under the staging directory
    size_gb: float  # what it takes once staged (archives: their contents)
    estimated: bool = False  # size guessed (a compression tarfile cannot read)
    top: str = ""  # an archive whose members all sit in one directory: that directory (data.tar -> data/...)


def staged_name(path: str) -> tuple[str, str]:
    """(kind, name under the staging directory): data.tar.gz -> (tar, data); imagenet/ -> (dir, imagenet)."""
    base = os.path.basename(os.path.normpath(path))
    lower = base.lower()
    if os.path.isdir(path):
        return "dir", base
    for suffix in TAR_SUFFIXES:
        if lower.endswith(suffix):
            return "tar", base[: -len(suffix)] or base
    if lower.endswith(".zip"):
        return "zip", base[:-4] or base
    return "file", base


def describe_source(path: str, cwd: str) -> StageSource:
    """Kind, name and staged size of a --stage source (reads the directory tree or the archive's listing)."""
    full = os.path.normpath(os.path.join(cwd, path))
    if not os.path.exists(full):
        raise UsageError(f"--stage {path}: no such file or directory", "give a directory or an archive (.tar, "
                         ".tar.gz, .zip, ...) on a file system the compute nodes see")
    kind, name = staged_name(full)
    if kind == "dir":
        total = 0
        for root, _dirs, files in os.walk(full):
            for file in files:
                try:
                    total += os.lstat(os.path.join(root, file)).st_size
                except OSError:
                    pass
        return StageSource(full, kind, name, total / GB)
    if kind == "zip":
        import zipfile

        try:
            with zipfile.ZipFile(full) as archive:
                members = archive.infolist()
                return StageSource(full, kind, name, sum(i.file_size for i in members) / GB,
                                   top=common_top([i.filename for i in members]))
        except (OSError, zipfile.BadZipFile) as exc:
            raise UsageError(f"--stage {path}: not a readable zip archive ({exc})", "check the file") from None
    if kind == "tar":
        return _tar_source(full, name, path)
    return StageSource(full, kind, name, os.path.getsize(full) / GB)


def _tar_source(full: str, name: str, given: str) -> StageSource:
    import tarfile

    size = os.path.getsize(full)
    if full.lower().endswith((".zst", ".tzst")):
        # tarfile cannot read zstd; a compressed archive usually holds 2-4x its size
        return StageSource(full, "tar", name, 3 * size / GB, estimated=True)
    try:
        with tarfile.open(full) as archive:
            members = archive.getmembers()
            return StageSource(full, "tar", name, sum(m.size for m in members if m.isfile()) / GB,
                               top=common_top([m.name for m in members]))
    except (OSError, tarfile.TarError, EOFError) as exc:
        raise UsageError(f"--stage {given}: not a readable tar archive ({exc})", "check the file") from None


def common_top(names: list[str]) -> str:
    """The one top-level directory every member sits in ('data/a', 'data/b/c' -> 'data'), else ''."""
    tops = {name.lstrip("./").split("/", 1)[0] for name in names if name.lstrip("./")}
    nested = any("/" in name.lstrip("./").rstrip("/") for name in names)
    return tops.pop() if len(tops) == 1 and nested else ""


def staged_variables(sources: tuple[StageSource, ...]) -> list[tuple[str, str]]:
    """(variable, shell value) the training sees: ENVRUN_STAGED, ENVRUN_STAGED_2, ...; the names (a file's,
    an archive member's) are quoted: only $ENVRUN_STAGE_DIR is expanded."""
    names = [name for name in (s.name for s in sources)]
    if len(set(names)) != len(names):
        raise UsageError(f"two --stage sources would land under the same name ({', '.join(shown(n) for n in names)})",
                         "rename one of them (or pack them into one archive)")
    out = []
    for index, source in enumerate(sources, start=1):
        variable = "ENVRUN_STAGED" if index == 1 else f"ENVRUN_STAGED_{index}"
        name = _one_name(source.name, f"--stage {source.path}: the staged name")
        top = _one_name(source.top, f"--stage {source.path}: the archive's top directory") if source.top else ""
        out.append((variable, '"$ENVRUN_STAGE_DIR"/' + quote(name + (f"/{top}" if top else ""))))
    return out


def _one_name(name: str, where: str) -> str:
    """A name directly under the staging directory: one path component, no control characters."""
    refuse_control(name, where)
    if name in ("", ".", "..") or "/" in name:
        raise UsageError(f"{where}: {shown(name)} is not a file name", "rename the source (or the archive's "
                         "top directory) to a plain name")
    return name


def stage_dir_value(directory: str, where: str) -> str:
    """The recipe's staging directory as a double-quoted shell value: $VAR and ${VAR} are expanded (it names
    the node's local disk, e.g. $LOCAL_SCRATCH), nothing else ($(...), backquotes, backslashes) may be in it."""
    refuse_control(directory, where)
    plain = _VARIABLE.sub("", directory)
    if any(char in plain for char in '$`"\\'):
        raise UsageError(f"batch.staging.dir {shown(directory)} ({where}): only $VAR and ${{VAR}} may be expanded in it",
                         "write a path with variables only, e.g. $LOCAL_SCRATCH or /tmp/envrun-stage-${SLURM_JOB_ID}")
    return f'"{directory}"'


# One task per node runs this: $1 the staging directory, then (kind, source, name) triples. The directory may
# lie in a place other users write (/tmp/envrun-stage-<job id> on a node others' jobs share, with a job id they
# can guess): one another user made first, or their link there, would get the data (theirs to read or swap).
# So the directory, and a link at its name, must be the user's own or root's (a site's per-job directory, or
# its link to the node's disk); a new one is made 0700.
STAGE_SCRIPT = r"""set -e
dir=$1; shift
node=${SLURMD_NODENAME:-$(hostname)}
mkdir -p -m 700 "$dir"
me=$(id -u)
ours() { [ -n "$(find "$1" -maxdepth 0 \( -user "$me" -o -user 0 \) 2>/dev/null)" ]; }
if ! ours "$dir" || ! ours "$dir/"; then
  echo "envrun: stage: $dir on $node was made by another user (or is their link): nothing staged;" \
       "fix: stage to the job's own directory (\$LOCAL_SCRATCH, \$TMPDIR), or ask its owner to remove it" >&2
  exit 1
fi
start=$(date +%s)
while [ $# -gt 0 ]; do
  kind=$1 src=$2 name=$3; shift 3
  if [ -e "$dir/$name" ]; then
    echo "envrun: stage: $dir/$name is already on $node"
    continue
  fi
  tmp="$dir/.$name.partial-$node-$$"
  rm -rf "$tmp"
  case $kind in
    tar) mkdir -p "$tmp" && tar -xf "$src" -C "$tmp" ;;
    zip) mkdir -p "$tmp" && python3 -m zipfile -e "$src" "$tmp" ;;
    dir) mkdir -p "$tmp" && cp -a "$src/." "$tmp/" ;;
    *) cp "$src" "$tmp" ;;
  esac
  mv -T "$tmp" "$dir/$name" 2>/dev/null || { rm -rf "$tmp"; echo "envrun: stage: $dir/$name is already on $node"; }
done
echo "envrun: staged to $dir on $node in $(( $(date +%s) - start )) s"
"""
