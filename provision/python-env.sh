#!/usr/bin/env bash
# The checkout's own Python environment: .venv with envbuild (editable) and its test tools.
# Uses the host's pip configuration (index URLs, find-links, certificates) like any pip install.
# Fast when nothing changed: pyproject.toml's hash is remembered in .venv.
set -euo pipefail
LOG_TAG="python-env"
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$HERE/lib.sh"
REPO=$(cd "$HERE/.." && pwd)
VENV=$REPO/.venv
STAMP=$VENV/.envbuild-pyproject.sha256

# The system's Python by default, not the first python3 on root's PATH: a venv points at its interpreter,
# and one under root's 0700 home (pyenv, conda) cannot be run by anyone else, while the checkout's
# bin/envbuild and bin/envrun must work for every user of the machine (the tests run them as an
# unprivileged user, tests/e2e/test_unprivileged_user.py).
python=${PYTHON:-$([[ -x /usr/bin/python3 ]] && echo /usr/bin/python3 || echo python3)}
command -v "$python" >/dev/null || die "no $python on PATH (apt-get install python3 python3-venv)"
python_home=$(dirname "$(command -v "$python")")
want="$(sha256sum "$REPO/pyproject.toml" | cut -d' ' -f1) $python_home"
if [[ -f $VENV/pyvenv.cfg ]] && ! grep -qxF "home = $python_home" "$VENV/pyvenv.cfg"; then
    log "$VENV was made with another Python ($(sed -n 's/^home = //p' "$VENV/pyvenv.cfg")): making it again with $python"
    rm -rf "$VENV"
fi
# Byte-compile the checkout: with PYTHONDONTWRITEBYTECODE set (as on some hosts) Python would
# recompile every module at every start, which costs envrun ~15 ms per launch. compileall writes
# the .pyc files anyway, and Python still reads them.
compile_checkout() { "$VENV/bin/python" -m compileall -q "$REPO/envbuild" >/dev/null || warn "compileall failed"; }
# envrun's repeat launch without Python (envbuild/launch/repeatlaunch.c; the checkout's bin/envrun runs it
# first): built when missing or older than its source. Without a C compiler bin/envrun starts Python on
# every launch, as before (~11 ms more per launch).
build_repeat_launcher() {
    local source=$REPO/envbuild/launch/repeatlaunch.c target=$VENV/libexec/envrun-repeat
    [[ -x $target && ! $source -nt $target ]] && return 0
    if ! command -v cc >/dev/null; then
        warn "no C compiler (cc): bin/envrun will start Python on every launch (apt-get install gcc libc6-dev)"
        return 0
    fi
    mkdir -p "$VENV/libexec"
    if cc -O2 -std=c11 -Wall -o "$target.new" "$source"; then
        chmod 0755 "$target.new" && mv -f "$target.new" "$target"
        log "built $target"
    else
        rm -f "$target.new"
        warn "could not build $target: bin/envrun will start Python on every launch"
    fi
}
if [[ -x $VENV/bin/python && -f $STAMP && $(cat "$STAMP") == "$want" ]] && "$VENV/bin/python" -c 'import envbuild' 2>/dev/null; then
    compile_checkout
    build_repeat_launcher
    log "up to date: $VENV"
    exit 0
fi
t0=$(now)
if [[ ! -x $VENV/bin/python ]]; then
    "$python" -m venv "$VENV" || die "cannot create $VENV (on Debian: apt-get install python3-venv)"
fi
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -e "${REPO}[test]"
compile_checkout
build_repeat_launcher
printf '%s\n' "$want" >"$STAMP"
log "installed envbuild and test tools into $VENV in $(elapsed "$t0") s"
