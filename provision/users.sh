#!/usr/bin/env bash
# An unprivileged account for the tests that run envbuild and envrun as users do (never root on a
# cluster): the e2e path and the trust tests (tests/e2e/test_unprivileged_user.py, tests/launch/...)
# act as this user, and as a stranger who plants files. Idempotent; fast when the account exists.
#   provision/users.sh            (as root)
# The names can be changed with ENVBUILD_TEST_USER / ENVBUILD_TEST_STRANGER / ENVBUILD_TEST_GROUP (the tests read the same).
set -euo pipefail
LOG_TAG=users
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$HERE/lib.sh"
need_root

ensure_user() {
    local name=$1
    if id -u "$name" >/dev/null 2>&1; then
        return 0
    fi
    # A normal login account with its own home (its caches live there, as on a cluster) and its own
    # group; no password: tests switch to it with setpriv/runuser as root.
    useradd --create-home --shell /bin/bash --user-group "$name" || die "cannot create user $name"
    log "created user $name (uid $(id -u "$name"))"
}

# Unprivileged apptainer mounts images through FUSE (squashfuse, provision/install.sh): users must be able to
# open /dev/fuse. A standard Debian system gets 0666 from udev's rule for fuse; this machine has no udev, and
# /dev is made anew at each boot, hence every run.
if [[ -c /dev/fuse && $(stat -c %a /dev/fuse) != 666 ]]; then
    chmod 0666 /dev/fuse
    log "/dev/fuse made usable by users (0666, as udev's rule on a standard Debian system)"
fi

ensure_user "${ENVBUILD_TEST_USER:-envbuild-ci}"
ensure_user "${ENVBUILD_TEST_STRANGER:-envbuild-stranger}"

# A project group both accounts belong to (issue 40): the attacker-and-victim tests (tests/hostile/) share a
# group project directory, build store, report directory and Jupyter prefix with it, as members of one
# project do on a cluster. The tests make it too when missing (tests/support/attacker.py).
ensure_group_member() {
    local group=$1 user=$2
    if ! getent group "$group" >/dev/null; then
        groupadd "$group" || die "cannot create group $group"
        log "created group $group"
    fi
    if ! id -nG "$user" | tr ' ' '\n' | grep -qx "$group"; then
        gpasswd -a "$user" "$group" >/dev/null || die "cannot add $user to group $group"
        log "added $user to group $group"
    fi
}
ensure_group_member "${ENVBUILD_TEST_GROUP:-envbuild-proj}" "${ENVBUILD_TEST_USER:-envbuild-ci}"
ensure_group_member "${ENVBUILD_TEST_GROUP:-envbuild-proj}" "${ENVBUILD_TEST_STRANGER:-envbuild-stranger}"
