#!/usr/bin/env bash
# Check that what install.sh and cluster.sh set up actually works end to end.
#
# Usage: provision/selftest.sh [apptainer] [slurm] [multi]   (default: apptainer slurm)
#
#   apptainer  debootstrap a minbase bookworm rootfs with python3 (cached in
#              $ENVBUILD_SELFTEST_DIR, default /var/tmp/envbuild-selftest), then
#              exec --writable on it, build a SIF, exec the SIF, unpack the SIF
#              to a sandbox (exercises apptainer's wrapped unsquashfs)
#   slurm      srun -n2 (ranks, CPU binding), --gres=gpu:2 (CUDA_VISIBLE_DEVICES),
#              sbatch --wait, srun + apptainer exec of the SIF
#   multi      like slurm across the namespaced nodes of `cluster.sh start --nodes 2`
#
# Exits non-zero at the first failed check.
set -euo pipefail

LOG_TAG=selftest
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$HERE/lib.sh"

T_DIR=${ENVBUILD_SELFTEST_DIR:-/var/tmp/envbuild-selftest}
ROOTFS=$T_DIR/rootfs
SIF=$T_DIR/x.sif
SANDBOX=$T_DIR/sandbox
PASS=0

indent() { sed 's/^/       | /'; }

# Run a check: description, then the command. On success show the last few
# lines of its output, on failure the last 40.
check() {
    local what=$1 t out
    shift
    t=$(now)
    if out=$("$@" 2>&1); then
        PASS=$((PASS + 1))
        log "ok   $what ($(elapsed "$t") s)"
        [[ -z $out ]] || tail -n 3 <<<"$out" | indent
    else
        log "FAIL $what"
        tail -n 40 <<<"$out" | indent >&2
        exit 1
    fi
}

# Like check, and the output must match an extended regex.
expect() {
    local what=$1 re=$2 out
    shift 2
    out=$("$@" 2>&1) || {
        log "FAIL $what (exit status)"
        indent <<<"$out" >&2
        exit 1
    }
    if grep -Eq -- "$re" <<<"$out"; then
        PASS=$((PASS + 1))
        log "ok   $what"
        indent <<<"$out"
    else
        log "FAIL $what: output does not match /$re/"
        indent <<<"$out" >&2
        exit 1
    fi
}

test_apptainer() {
    mkdir -p "$T_DIR"
    # The rootfs takes about a minute; reuse it once it completed.
    if [[ ! -e $ROOTFS/.envbuild-selftest-complete ]]; then
        local mirror keyring args=()
        mirror=$(debian_mirror)
        keyring=$(debian_keyring)
        [[ -z $keyring ]] || args+=(--keyring="$keyring")
        rm -rf "$ROOTFS"
        check "debootstrap minbase $(os_codename) + python3 from $mirror" \
            debootstrap --variant=minbase --include=python3,python3-venv "${args[@]}" \
            "$(os_codename)" "$ROOTFS" "$mirror"
        touch "$ROOTFS/.envbuild-selftest-complete"
    else
        log "reusing $ROOTFS"
    fi
    check "apptainer --version" apptainer --version
    # Plain form, as the brief asks (prints harmless warnings: the minbase
    # rootfs has no /etc/hosts to bind onto, and no mount point for the cwd).
    expect "exec --writable on the rootfs dir" '^1$' \
        apptainer exec --writable "$ROOTFS" python3 -c 'print(1)'
    # The clean form for build steps: no host $HOME//tmp leaking in
    # (--contain), no /etc/hosts bind, start in /. Must print no WARNING.
    local out
    out=$(apptainer exec --writable --contain --no-mount bind-paths --pwd / "$ROOTFS" \
        sh -c 'python3 -m venv /tmp/v && /tmp/v/bin/python -c "print(2)"' 2>&1) || true
    if [[ $out == 2 ]]; then
        PASS=$((PASS + 1))
        log "ok   exec --writable --contain --no-mount bind-paths --pwd / (venv works, no warnings)"
    else
        log "FAIL exec --writable --contain --no-mount bind-paths --pwd /"
        indent <<<"$out" >&2
        exit 1
    fi
    rm -f "$SIF"
    check "apptainer build SIF from the dir" apptainer -s build "$SIF" "$ROOTFS"
    expect "exec the SIF" '^Python 3' apptainer exec "$SIF" python3 -V
    rm -rf "$SANDBOX"
    check "apptainer build --sandbox from the SIF" apptainer -s build --sandbox "$SANDBOX" "$SIF"
    expect "exec --writable on the unpacked sandbox" 'written' \
        apptainer exec --writable "$SANDBOX" sh -c 'touch /selftest && echo written'
    expect "singularity alias" 'version' singularity --version
}

need_sif() {
    [[ -e $SIF ]] || die "$SIF missing; run '$0 apptainer' first"
}

test_slurm() {
    need_sif
    "$HERE/cluster.sh" status >/dev/null || die "cluster not healthy; run provision/cluster.sh start"
    # shellcheck disable=SC2016 # expanded by the job's shell
    expect "srun -n2: ranks 0,1 each bound to one CPU" '^1 1 Cpus_allowed_list:[[:space:]]+[0-9]+$' \
        srun -n2 bash -c 'echo $SLURM_PROCID $SLURM_LOCALID $(grep Cpus_allowed_list /proc/self/status)'
    expect "srun --gres=gpu:2 sets CUDA_VISIBLE_DEVICES" '^CUDA_VISIBLE_DEVICES=0,1$' \
        bash -c "srun --gres=gpu:2 -n1 env | grep -i -E 'CUDA|GPU' | sort"
    local out
    out=$(mktemp /tmp/envbuild-selftest-XXXXXX.out)
    # shellcheck disable=SC2016
    check "sbatch --wait (2 tasks)" sbatch --wait -n2 -o "$out" \
        --wrap 'srun bash -c "echo task \$SLURM_PROCID on \$(hostname)"'
    expect "sbatch job output" 'task 1 on' cat "$out"
    rm -f "$out"
    expect "srun -n1 apptainer exec SIF" '^Python 3' srun -n1 apptainer exec "$SIF" python3 -V
}

test_multi() {
    need_sif
    "$HERE/cluster.sh" status >/dev/null || die "cluster not healthy; run provision/cluster.sh start --nodes 2"
    expect "srun -N2 -n2 runs on node1 and node2" 'node2' srun -N2 -n2 hostname
    # shellcheck disable=SC2016
    expect "node1 reaches node2's slurmd by name over the bridge" '^connected$' \
        srun -N1 -n1 -w node1 bash -c 'exec 3<>/dev/tcp/node2/6818 && echo connected'
    expect "srun -N2 apptainer exec SIF hostname" 'node2' \
        srun -N2 -n2 apptainer exec "$SIF" python3 -c 'import socket; print(socket.gethostname())'
    # What torch's c10d rendezvous needs: rank 0 serves on its node, the other
    # node connects to it by hostname, from inside the container.
    local py
    py=$(mktemp /tmp/envbuild-selftest-XXXXXX.py)
    cat >"$py" <<'EOF'
import os, socket, time
rank, host = int(os.environ["SLURM_PROCID"]), socket.gethostname()
if rank == 0:
    srv = socket.create_server(("0.0.0.0", 29511))
    srv.settimeout(20)
    conn, addr = srv.accept()
    print(f"rank0 on {host} got {conn.recv(100).decode()!r} from {addr[0]}")
else:
    for _ in range(100):
        try:
            conn = socket.create_connection(("node1", 29511), timeout=2)
            break
        except OSError:
            time.sleep(0.1)
    conn.sendall(f"hello from {host}".encode())
EOF
    expect "rendezvous-style TCP from node2 to node1 by name, in the container" \
        "rank0 on node1 got 'hello from node2'" srun -N2 -n2 apptainer exec "$SIF" python3 "$py"
    rm -f "$py"
}

need_root
T0=$(now)
# Start from a directory that exists in the images and on the nodes, so
# apptainer does not warn about the working directory.
cd /tmp
[[ $# -gt 0 ]] || set -- apptainer slurm
for t in "$@"; do
    case $t in
    apptainer) test_apptainer ;;
    slurm) test_slurm ;;
    multi) test_multi ;;
    *) die "unknown test: $t" ;;
    esac
done
log "all $PASS checks passed in $(elapsed "$T0") s"
