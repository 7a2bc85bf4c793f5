"""Where envbuild puts things inside the sandbox and the image; build steps, the executor and verify share these."""

from __future__ import annotations

# Build-time mount points inside the sandbox (host pip sources, caches, tools); removed before squashing.
HOST_MOUNT = "/.envbuild-host"


# Where the image records how it was made.
RECORD_DIR = "/.envbuild"


ENV_SCRIPT = "/.singularity.d/env/90-envbuild.sh"


# Apptainer's and SingularityCE's default PATH inside a container.
DEFAULT_CONTAINER_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


LABELS_FILE = "/.singularity.d/labels.json"


# What `apptainer build --sandbox` (and singularity's) writes into a tree by host paths, following any link on the
# way: a base whose tree has a link out of it at one of these would have the runtime write on the host.
RUNTIME_WRITES = (
    "/.singularity.d/labels.json", "/.singularity.d/Singularity", "/.singularity.d/runscript",
    "/.singularity.d/startscript", "/.singularity.d/test", "/.singularity.d/runscript.help",
    "/.singularity.d/env/90-environment.sh", "/.singularity.d/actions/run", "/.singularity.d/libs/.keep",
    "/environment", "/singularity", "/.exec", "/.run", "/.shell", "/.test",
)
