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
