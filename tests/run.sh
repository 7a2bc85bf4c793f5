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
# growing without bound on a machine that runs CI often (a fresh run fills about 6 GB of it).
ENVBUILD_CACHE_DIR="${ENVBUILD_TEST_CACHE:-/var/tmp/envbuild-test-cache}" bin/envbuild cache prune --older-than 3d --max-size 12G >/dev/null || true
# A run needs about 25 GB free (the store, the images the tests build under /tmp, pytest's temporary files);
# say so at once rather than as a build's "does not have room" twenty minutes in.
for dir in /tmp /var/tmp; do
    free_kb=$(df -Pk "$dir" | awk 'NR == 2 {print $4}')
    if [ "${free_kb:-0}" -lt 25000000 ]; then
        echo "warning: $dir has $((free_kb / 1024)) MB free; the tests need about 25 GB (images, the build store, pytest's" \
             "temporary files): free space there (old /tmp/pytest-of-*/ runs, \$ENVBUILD_TEST_CACHE) first" >&2
    fi
done
# --durations: the slowest tests in every CI log, to keep the whole run under its 45-minute budget
if [ "$#" -gt 0 ]; then
    exec .venv/bin/python -m pytest --durations=30 "$@"
fi
# The whole suite in two lanes, one per core. Lane 1: the ~90 tests that need the Slurm test cluster, one at a
# time (a two-node test restarts the cluster, so nothing else may use it meanwhile); they spend much of their time
# waiting on Slurm's timers. Lane 2, beside it: the ~3,500 tests that need no container and no cluster (about
# 4 minutes of one core), then the ~130 that build and run images without the cluster (the build store is shared
# and safe for concurrent builds: tests/integration/test_concurrent_builds.py). Each pytest has its own temporary
# directory; every one must pass. Then the tests marked `quiet` run alone.
FAST_MARKERS="not slow and not apptainer and not slurm and not quiet"
IMAGE_MARKERS="(slow or apptainer) and not slurm and not quiet"
CLUSTER_MARKERS="slurm and not quiet"
lane_dir=$(mktemp -d /tmp/envbuild-lane2-tests.XXXXXX)
# `trap -`: a background job of a non-interactive shell would start with SIGINT and SIGQUIT ignored, and so
# would every process the tests start (envrun keeps an ignored signal ignored: tests/launch/test_supervise.py)
(
    trap - INT QUIT
    set +e
    .venv/bin/python -m pytest -p no:cacheprovider -m "$FAST_MARKERS" --basetemp="$lane_dir/fast" >"$lane_dir/fast.log" 2>&1
    echo $? >"$lane_dir/fast.status"
    .venv/bin/python -m pytest -p no:cacheprovider --durations=20 -m "$IMAGE_MARKERS" --basetemp="$lane_dir/images" \
        >"$lane_dir/images.log" 2>&1
    echo $? >"$lane_dir/images.status"
) </dev/null &
lane_pid=$!
trap 'kill "$lane_pid" 2>/dev/null || true' INT TERM
set +e
.venv/bin/python -m pytest --durations=30 -m "$CLUSTER_MARKERS"
slurm_status=$?
wait "$lane_pid"
# Last, alone: the tests that hold a measured figure to an independent truth within a few per cent (a busy second
# core would move the figure they check, not the tool's correctness).
.venv/bin/python -m pytest -p no:cacheprovider -m "quiet"
quiet_status=$?
set -e
fast_status=$(cat "$lane_dir/fast.status" 2>/dev/null || echo 1)
image_status=$(cat "$lane_dir/images.status" 2>/dev/null || echo 1)
for lane in fast images; do
    status=$(cat "$lane_dir/$lane.status" 2>/dev/null || echo 1)
    case $lane in
        fast) echo "=== the tests that need no container and no cluster (-m \"$FAST_MARKERS\"), run beside the cluster's: exit $status ===" ;;
        images) echo "=== the tests that build and run images without the cluster (-m \"$IMAGE_MARKERS\"), run beside the cluster's: exit $status ===" ;;
    esac
    if [ "$status" -eq 0 ]; then tail -n 25 "$lane_dir/$lane.log"; else cat "$lane_dir/$lane.log"; fi
done
rm -rf "$lane_dir"
[ "$slurm_status" -eq 0 ] && [ "$fast_status" -eq 0 ] && [ "$image_status" -eq 0 ] && [ "$quiet_status" -eq 0 ]
