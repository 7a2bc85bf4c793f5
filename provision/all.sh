#!/usr/bin/env bash
# Everything the main job and the tests need, in order: system packages and apptainer,
# the checkout's Python environment, the unprivileged test users, and a running local Slurm. Idempotent and fast when done.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
"$HERE/install.sh"
"$HERE/python-env.sh"
"$HERE/users.sh"
"$HERE/cluster.sh" start "$@"
