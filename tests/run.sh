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
if [ "$#" -gt 0 ]; then
    exec .venv/bin/python -m pytest --durations=30 "$@"
fi
# The whole suite: the ~3,100 tests that need no container and no cluster (about 3 minutes of one core) run
# beside the ~190 that build images and run jobs, which spend much of their time waiting on Slurm's timers,
# apptainer and PyPI. Two pytest processes, each with its own temporary directory; both must pass.
FAST_MARKERS="not slow and not apptainer and not slurm"
fast_dir=$(mktemp -d /tmp/envbuild-fast-tests.XXXXXX)
# `trap -`: a background job of a non-interactive shell would start with SIGINT and SIGQUIT ignored, and so
# would every process the tests start (envrun keeps an ignored signal ignored: tests/launch/test_supervise.py)
(trap - INT QUIT; exec .venv/bin/python -m pytest -p no:cacheprovider -m "$FAST_MARKERS" --basetemp="$fast_dir/tmp") \
    >"$fast_dir/log" 2>&1 </dev/null &
fast_pid=$!
trap 'kill "$fast_pid" 2>/dev/null || true' INT TERM
set +e
.venv/bin/python -m pytest --durations=30 -m "not ($FAST_MARKERS)"
slow_status=$?
wait "$fast_pid"
fast_status=$?
set -e
echo "=== the tests that need no container and no cluster (-m \"$FAST_MARKERS\"), run beside the others: exit $fast_status ==="
if [ "$fast_status" -eq 0 ]; then tail -n 5 "$fast_dir/log"; else cat "$fast_dir/log"; fi
rm -rf "$fast_dir"
[ "$slow_status" -eq 0 ] && [ "$fast_status" -eq 0 ]
