#!/usr/bin/env bash
# Install everything envbuild needs on a Debian bookworm machine, as root:
#   - build/run tools from bookworm (squashfs-tools, debootstrap, Slurm, munge, ...)
#   - Apptainer, which bookworm lacks, taken from Debian sid together with a
#     private copy of sid's glibc (apptainer 1.4 needs glibc >= 2.38, bookworm
#     has 2.36), without touching the system's glibc or APT state
#   - an Apptainer configuration that works under this kernel's capability
#     bounding set
#
# Usage: provision/install.sh [--force]
#   --force   redo every step even if the completion stamp says all is done
#
# Idempotent: a completed install leaves a stamp under $STATE_DIR; a re-run then
# only checks (dpkg-query, `apptainer --version`, config) and exits in well
# under a second.
set -euo pipefail

LOG_TAG=install
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$HERE/lib.sh"

# Bump when the recipe below changes in a way an existing install must redo.
RECIPE_VERSION=1

STATE_DIR=${ENVBUILD_PROVISION_STATE:-/var/lib/envbuild-provision}
STAMP=$STATE_DIR/install.stamp
SID_DIR=$STATE_DIR/apt-sid # private APT config/lists/cache for sid

MULTIARCH=$(multiarch)
LDSO=$(ldso_name)
APPTAINER_LIBEXEC=/usr/lib/$MULTIARCH/apptainer
# Private glibc for apptainer. It must live under /usr: when apptainer unpacks a
# SIF (build --sandbox) it runs unsquashfs in a sandbox that only has /usr.
GLIBC_DIR=$APPTAINER_LIBEXEC/glibc
PATCHED_BINS=(/usr/bin/apptainer "$APPTAINER_LIBEXEC/bin/starter")
APPTAINER_CONF=/etc/apptainer/apptainer.conf

# Packages taken from bookworm. squashfuse and fuse3 (fusermount3) let apptainer mount SIF images and
# squashfs overlays without root (user namespaces, no setuid starter: users on clusters run it so, and the
# tests do too); without them an unprivileged run unpacks the whole image into a temporary sandbox at
# every start and cannot mount an overlay at all ("failed to attach loop device"). fuse2fs: ext3 overlays.
# libcap2-bin gives capsh (decoding CapBnd),
# procps gives pgrep/ps used by cluster.sh; chromium (headless) opens the page
# `envbuild catalogue` writes, in its tests and for the README's picture.
# Apptainer's own Depends are added at install time from the downloaded
# package's control file.
BASE_PKGS=(
    squashfs-tools debootstrap patchelf uidmap slurm-wlm munge python3-venv squashfuse fuse3 fuse2fs
    ca-certificates iproute2 util-linux libcap2-bin procps chromium strace gcc libc6-dev
)

FORCE=0
for arg in "$@"; do
    case $arg in
    --force) FORCE=1 ;;
    -h | --help)
        sed -n '2,16p' "$0"
        exit 0
        ;;
    *) die "unknown argument: $arg" ;;
    esac
done

need_root
T0=$(now)

stamp_get() { if [[ -r $STAMP ]]; then sed -n "s/^$1=//p" "$STAMP" | head -n1; fi; }

# slurmd -V needs no slurm.conf (sinfo --version does, and fails before cluster.sh ran).
slurm_version() { slurmd -V 2>/dev/null | awk '{ print $2 }' || true; }

# --- fast path -----------------------------------------------------------
# Trust the stamp only after cheap checks that the things it describes are
# still there: packages installed, apptainer runs, our config is in place.
fast_path() {
    [[ $FORCE -eq 0 && -r $STAMP ]] || return 1
    [[ $(stamp_get recipe) == "$RECIPE_VERSION" ]] || {
        log "stamp is from recipe $(stamp_get recipe), this is $RECIPE_VERSION: redoing"
        return 1
    }
    local deps missing ver
    read -r -a deps <<<"$(stamp_get bookworm_deps)"
    missing=$(missing_packages "${BASE_PKGS[@]}" "${deps[@]}")
    [[ -z $missing ]] || {
        log "packages missing: $(tr '\n' ' ' <<<"$missing")"
        return 1
    }
    ver=$(apptainer --version 2>/dev/null) || {
        log "apptainer --version fails: redoing"
        return 1
    }
    [[ $ver == "$(stamp_get apptainer_version_out)" ]] || {
        log "apptainer reports '$ver', stamp says '$(stamp_get apptainer_version_out)': redoing"
        return 1
    }
    grep -Eq '^[[:space:]]*root default capabilities[[:space:]]*=[[:space:]]*file[[:space:]]*$' "$APPTAINER_CONF" || {
        log "$APPTAINER_CONF lacks 'root default capabilities = file': redoing"
        return 1
    }
    log "already installed (stamp $STAMP, $(stamp_get date))"
    log "  packages: all ${#BASE_PKGS[@]} base + ${#deps[@]} apptainer deps present"
    log "  $ver (sid deb $(stamp_get apptainer_deb), glibc $(stamp_get glibc_deb) in $GLIBC_DIR)"
    log "  slurm $(slurm_version), $(munged --version 2>&1 | head -n1)"
    log "  singularity -> $(readlink -f "$(command -v singularity)" 2>/dev/null || echo missing)"
    log "  root capabilities ('file' mode): $(stamp_get root_caps | tr ',' '\n' | grep -c .) granted, not in bounding set: $(stamp_get not_bound)"
    log "done in $(elapsed "$T0") s (nothing to do; --force to redo)"
    return 0
}
fast_path && exit 0

# --- helpers -------------------------------------------------------------
# Keep package installs from starting daemons: cluster.sh starts munged and
# Slurm itself, with its own configuration. Docker-style images already ship
# a policy-rc.d; only add (and later remove) one if there is none.
POLICY_RC=/usr/sbin/policy-rc.d
OWN_POLICY_RC=0
WORK=""
cleanup() {
    [[ $OWN_POLICY_RC -eq 1 ]] && rm -f "$POLICY_RC"
    [[ -n $WORK ]] && rm -rf "$WORK"
    return 0
}
trap cleanup EXIT

APT_UPDATED=0
apt_install_bookworm() {
    [[ $# -gt 0 ]] || return 0
    if [[ ! -e $POLICY_RC ]]; then
        printf '#!/bin/sh\nexit 101\n' >"$POLICY_RC"
        chmod 755 "$POLICY_RC"
        OWN_POLICY_RC=1
    fi
    export DEBIAN_FRONTEND=noninteractive
    if [[ $APT_UPDATED -eq 0 ]]; then
        log "apt-get update (system sources)"
        apt-get update -qq
        APT_UPDATED=1
    fi
    log "apt-get install $*"
    apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

# apt-get options that point APT at a private config and state for sid, so
# the system's sources, lists, cache and preferences stay untouched.
SID_APT=(
    -o "Dir::Etc::SourceList=/dev/null"
    -o "Dir::Etc::SourceParts=$SID_DIR/sources.list.d"
    -o "Dir::Etc::Preferences=/dev/null"
    -o "Dir::Etc::PreferencesParts=$SID_DIR/preferences.d"
    -o "Dir::State::Lists=$SID_DIR/lists"
    -o "Dir::Cache=$SID_DIR/cache"
    # apt drops privileges to _apt for downloads; our private dirs are root's.
    -o "APT::Sandbox::User=root"
    -q
)

# --- 1. bookworm packages ------------------------------------------------
T=$(now)
mapfile -t MISSING < <(missing_packages "${BASE_PKGS[@]}")
if [[ ${#MISSING[@]} -eq 0 ]]; then
    log "bookworm packages: all ${#BASE_PKGS[@]} present, apt skipped"
else
    apt_install_bookworm "${MISSING[@]}"
    log "bookworm packages installed in $(elapsed "$T") s"
fi

# --- 2. apptainer + glibc from sid ----------------------------------------
# Everything apptainer needs from sid; sets APPTAINER_DEB_VER, LIBC_DEB_VER,
# APPTAINER_DEPS.
install_apptainer_from_sid() {
    local f rel lib found bin listing
    T=$(now)
    mkdir -p "$SID_DIR"/{sources.list.d,preferences.d,lists/partial,cache/archives/partial,debs}
    # Same mirror and keyring as the system's main stanza, suite sid.
    debian_stanza_for_suite sid >"$SID_DIR/sources.list.d/sid.sources"
    log "sid source (derived from $DEBIAN_SOURCES): $(awk '/^URIs:/ { print $2 }' "$SID_DIR/sources.list.d/sid.sources")"
    apt-get "${SID_APT[@]}" update >/dev/null
    rm -f "$SID_DIR"/debs/*.deb
    (cd "$SID_DIR/debs" && apt-get "${SID_APT[@]}" download apptainer libc6 >/dev/null)
    APPTAINER_DEB=$(compgen -G "$SID_DIR/debs/apptainer_*.deb" | head -n1)
    LIBC_DEB=$(compgen -G "$SID_DIR/debs/libc6_*.deb" | head -n1)
    [[ -n $APPTAINER_DEB && -n $LIBC_DEB ]] || die "apt-get download from sid produced no apptainer/libc6 .deb"
    APPTAINER_DEB_VER=$(dpkg-deb -f "$APPTAINER_DEB" Version)
    LIBC_DEB_VER=$(dpkg-deb -f "$LIBC_DEB" Version)
    log "downloaded apptainer $APPTAINER_DEB_VER and libc6 $LIBC_DEB_VER from sid in $(elapsed "$T") s"

    # Apptainer's runtime Depends (minus libc6, which we supply privately), taken
    # from bookworm. Version constraints are dropped: bookworm's libseccomp2 2.5.4
    # and libsqlite3-0 3.40 satisfy them; a future sid could need more, which the
    # loader check below would catch.
    mapfile -t APPTAINER_DEPS < <(
        dpkg-deb -f "$APPTAINER_DEB" Depends | tr ',' '\n' |
            sed -E 's/\(.*\)//; s/\|.*//; s/:any//; s/[[:space:]]//g' |
            grep -v -x -e '' -e libc6 | sort -u
    )
    log "apptainer Depends (w/o libc6): ${APPTAINER_DEPS[*]}"
    mapfile -t MISSING < <(missing_packages "${APPTAINER_DEPS[@]}")
    if [[ ${#MISSING[@]} -gt 0 ]]; then
        T=$(now)
        apt_install_bookworm "${MISSING[@]}"
        log "apptainer dependencies installed in $(elapsed "$T") s"
    fi

    WORK=$(mktemp -d /tmp/envbuild-install.XXXXXX)
    dpkg-deb -x "$APPTAINER_DEB" "$WORK/apptainer"
    dpkg-deb -x "$LIBC_DEB" "$WORK/libc"

    # Private glibc: every shared object sid's libc6 ships (libc, ld.so, libm,
    # libpthread, nss, ...) plus the host's copies of the other libraries the
    # binaries link (libseccomp, libsqlite3), so that all of them resolve from
    # this one dir via DT_RPATH whatever LD_LIBRARY_PATH says (apptainer
    # re-executes itself with LD_LIBRARY_PATH=/lib/<triplet>:/lib64 to run its
    # sandboxed unsquashfs for `build --sandbox`).
    T=$(now)
    rm -rf "$GLIBC_DIR.new"
    mkdir -p "$GLIBC_DIR.new"
    cp -a "$WORK/libc/usr/lib/$MULTIARCH"/*.so* "$GLIBC_DIR.new/"
    [[ -e $GLIBC_DIR.new/$LDSO ]] || die "sid libc6 has no $LDSO"
    for lib in libseccomp.so.2 libsqlite3.so.0; do
        found=$(compgen -G "/usr/lib/$MULTIARCH/$lib*" || true)
        [[ -n $found ]] || die "host lacks $lib (package missing?)"
        # shellcheck disable=SC2086 # intentional word splitting of the glob list
        cp -a $found "$GLIBC_DIR.new/"
    done

    # Patch the two dynamically linked executables: interpreter -> private ld.so,
    # DT_RPATH (not RUNPATH: RUNPATH loses to LD_LIBRARY_PATH, which apptainer
    # sets for its sandboxed helpers) -> private glibc dir.
    for bin in "${PATCHED_BINS[@]}"; do
        f=$WORK/apptainer$bin
        [[ -f $f ]] || die "package lacks $bin"
        patchelf --set-interpreter "$GLIBC_DIR/$LDSO" --force-rpath --set-rpath "$GLIBC_DIR" "$f"
    done

    # Install: private glibc first, then the files of the package. The binaries
    # are replaced with --remove-destination (unlink + create) so a running
    # apptainer never sees a half-written file ("text file busy" otherwise).
    if [[ -d $GLIBC_DIR ]]; then
        mv "$GLIBC_DIR" "$GLIBC_DIR.old"
    fi
    mkdir -p "$APPTAINER_LIBEXEC"
    mv "$GLIBC_DIR.new" "$GLIBC_DIR"
    rm -rf "$GLIBC_DIR.old"
    cp -a --remove-destination "$WORK/apptainer/usr/." /usr/
    cp -a "$WORK/apptainer/var/." /var/
    # /etc/apptainer are conffiles: like dpkg, keep an admin's (or our earlier)
    # edits; only add files that are missing. dpkg -x runs no maintainer
    # scripts; the postinst only registers the singularity alternative (below).
    while IFS= read -r -d '' f; do
        rel=${f#"$WORK/apptainer"}
        if [[ -d $f ]]; then
            mkdir -p "$rel"
        elif [[ ! -e $rel ]]; then
            cp -a "$f" "$rel"
        elif ! cmp -s "$f" "$rel"; then
            cp -a "$f" "$rel.sid-dist" # for reference, like dpkg's .dpkg-dist
        fi
    done < <(find "$WORK/apptainer/etc" -print0)
    log "apptainer files installed in $(elapsed "$T") s"

    # Loader check: every library the patched binaries need must resolve, and libc
    # must come from the private dir. Uses the private ld.so in list mode.
    for bin in "${PATCHED_BINS[@]}"; do
        listing=$("$GLIBC_DIR/$LDSO" --list "$bin") || die "loader check failed for $bin"
        if grep -q 'not found' <<<"$listing"; then
            printf '%s\n' "$listing" >&2
            die "$bin has unresolved libraries"
        fi
        grep -q "libc.so.6 => $GLIBC_DIR/libc.so.6" <<<"$listing" || {
            printf '%s\n' "$listing" >&2
            die "$bin does not take libc from $GLIBC_DIR"
        }
        log "$bin: interpreter $(patchelf --print-interpreter "$bin"), libs: $(awk '/=>/ { printf "%s ", $3 }' <<<"$listing")"
    done
}

# A dpkg-managed apptainer (e.g. a later backport) is left alone: overwriting
# its files would fight dpkg.
if [[ -z $(missing_packages apptainer) ]]; then
    APPTAINER_DEB_VER="dpkg $(dpkg-query -W -f='${Version}' apptainer)"
    LIBC_DEB_VER="system $(dpkg-query -W -f='${Version}' libc6)"
    APPTAINER_DEPS=()
    log "apptainer is installed as a Debian package ($APPTAINER_DEB_VER); not replacing it"
else
    install_apptainer_from_sid
fi

APPTAINER_VERSION_OUT=$(apptainer --version) || die "apptainer --version fails after install"
log "$APPTAINER_VERSION_OUT"

# --- 3. capabilities -----------------------------------------------------
# Root's default "full" capability request asks for every capability; the
# bounding set here lacks some (CAP_SYS_RESOURCE), and the starter then fails
# with "Requesting capability set ... while permitted ...". Use the "file"
# mode and grant root exactly those capabilities Apptainer knows AND the
# bounding set holds.
if grep -Eq '^[[:space:]]*root default capabilities[[:space:]]*=' "$APPTAINER_CONF"; then
    sed -i -E 's/^[[:space:]]*root default capabilities[[:space:]]*=.*/root default capabilities = file/' "$APPTAINER_CONF"
else
    printf 'root default capabilities = file\n' >>"$APPTAINER_CONF"
fi
CAPBND=$(awk '/^CapBnd:/ { print $2 }' /proc/self/status)
# capsh prints "0x...=cap_a,cap_b,..."; upper-case to Apptainer's spelling.
mapfile -t BOUND < <(capsh --decode="$CAPBND" | sed 's/^.*=//' | tr ',' '\n' | tr '[:lower:]' '[:upper:]' | sort -u)
mapfile -t AVAIL < <(apptainer capability avail | grep -oE '^CAP_[A-Z_]+' | sort -u)
mapfile -t GRANT < <(comm -12 <(printf '%s\n' "${AVAIL[@]}") <(printf '%s\n' "${BOUND[@]}"))
mapfile -t NOT_BOUND < <(comm -23 <(printf '%s\n' "${AVAIL[@]}") <(printf '%s\n' "${BOUND[@]}"))
[[ ${#GRANT[@]} -gt 0 ]] || die "no capability both available and in CapBnd=$CAPBND"
GRANT_CSV=$(IFS=,; printf '%s' "${GRANT[*]}")
# Sync root's list to exactly GRANT: add what is missing, drop what the
# bounding set no longer holds (e.g. from an install on another kernel).
# (`capability list` exits non-zero with FATAL when root has none yet.)
mapfile -t HAVE < <(apptainer capability list root 2>/dev/null | sed -n 's/^root \[user\]: //p' | tr ',' '\n' | grep . | sort -u)
mapfile -t ADD < <(comm -23 <(printf '%s\n' "${GRANT[@]}") <(printf '%s\n' "${HAVE[@]}") | grep .)
mapfile -t DROP < <(comm -13 <(printf '%s\n' "${GRANT[@]}") <(printf '%s\n' "${HAVE[@]}") | grep .)
# `capability add` prints two "may escalate privilege" warnings per cap;
# root is already all-powerful here, so summarise instead of repeating them.
if [[ ${#ADD[@]} -gt 0 ]]; then
    apptainer capability add --user root "$(IFS=,; printf '%s' "${ADD[*]}")" 2>/dev/null
fi
if [[ ${#DROP[@]} -gt 0 ]]; then
    apptainer capability drop --user root "$(IFS=,; printf '%s' "${DROP[*]}")" 2>/dev/null
fi
log "CapBnd=$CAPBND: root gets ${#GRANT[@]} of ${#AVAIL[@]} capabilities (added ${#ADD[@]}, dropped ${#DROP[@]}: ${DROP[*]:-}); not in bounding set: ${NOT_BOUND[*]:-none}"

# --- 4. singularity name ---------------------------------------------------
# cotainr and spython call `singularity`. Register it like the package's
# postinst does (update-alternatives), unless a real singularity exists.
SING=$(command -v singularity || true)
if [[ -n $SING && $(readlink -f "$SING") != "$(readlink -f /usr/bin/apptainer)" ]]; then
    log "a real singularity exists at $SING ($(readlink -f "$SING")); leaving it"
else
    update-alternatives --quiet --install /usr/bin/singularity singularity /usr/bin/singularity.apptainer 50 \
        --slave /usr/bin/run-singularity run-singularity /usr/bin/run-singularity.apptainer
    log "singularity -> $(readlink -f /usr/bin/singularity)"
fi

# --- 5. stamp --------------------------------------------------------------
mkdir -p "$STATE_DIR"
cat >"$STAMP.tmp" <<EOF
recipe=$RECIPE_VERSION
date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
apptainer_deb=$APPTAINER_DEB_VER
glibc_deb=$LIBC_DEB_VER
apptainer_version_out=$APPTAINER_VERSION_OUT
bookworm_deps=${APPTAINER_DEPS[*]}
root_caps=$GRANT_CSV
not_bound=${NOT_BOUND[*]:-none}
slurm=$(slurm_version)
EOF
mv "$STAMP.tmp" "$STAMP"

log "summary: $APPTAINER_VERSION_OUT (sid $APPTAINER_DEB_VER, glibc $LIBC_DEB_VER private in $GLIBC_DIR)"
log "summary: slurm $(slurm_version), $(munged --version 2>&1 | head -n1), $(mksquashfs -version 2>&1 | head -n1)"
log "done in $(elapsed "$T0") s; stamp $STAMP"
