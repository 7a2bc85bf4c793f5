#!/usr/bin/env bash
# Everything the main job and the tests need, in order: system packages and apptainer,
# the checkout's Python environment, and a running local Slurm. Idempotent and fast when done.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
"$HERE/install.sh"
"$HERE/python-env.sh"
"$HERE/cluster.sh" start "$@"
