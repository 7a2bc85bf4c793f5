#!/usr/bin/env bash
# The test suite, as CI runs it: provision what the tests need (apptainer, squashfs-tools,
# debootstrap, Slurm + munge, the checkout's .venv), then lint, type-check and run every test marker.
#   bash tests/run.sh [pytest args]      (as root on Debian bookworm)
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
bash provision/all.sh
.venv/bin/ruff check .
.venv/bin/mypy  # strict on envbuild/ (pyproject.toml's [tool.mypy])
# The tests share one build store across runs (bases, env layers, the reference image); keep it from
# growing without bound on a machine that runs CI often.
ENVBUILD_CACHE_DIR="${ENVBUILD_TEST_CACHE:-/var/tmp/envbuild-test-cache}" bin/envbuild cache prune --older-than 3d >/dev/null || true
# --durations: the slowest tests in every CI log, to keep the whole run under its 45-minute budget
exec .venv/bin/python -m pytest --durations=30 "$@"
