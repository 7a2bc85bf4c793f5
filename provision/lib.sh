# shellcheck shell=bash
# Helpers shared by provision/*.sh. Sourced, not executed.
#
# Everything that depends on the Debian mirror is derived at run time from the
# system's own APT configuration, so no mirror host name lives in this repo.

# Prefix every line of our own output so it stands out from apt/slurm noise.
log() { printf '[%s] %s\n' "${LOG_TAG:-provision}" "$*"; }
warn() { printf '[%s] WARNING: %s\n' "${LOG_TAG:-provision}" "$*" >&2; }
die() {
    printf '[%s] ERROR: %s\n' "${LOG_TAG:-provision}" "$*" >&2
    exit 1
}

need_root() {
    [[ ${EUID} -eq 0 ]] || die "must run as root"
}

# Seconds since the epoch with fractions, for timing our own phases cheaply.
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# The codename of the running system (bookworm); the "main" APT stanza is
# the one that lists exactly this suite.
os_codename() {
    local c=""
    if [[ -r /etc/os-release ]]; then
        c=$(. /etc/os-release && printf '%s' "${VERSION_CODENAME:-}")
    fi
    [[ -n $c ]] || die "cannot determine the Debian codename from /etc/os-release"
    printf '%s\n' "$c"
}

DEBIAN_SOURCES=${DEBIAN_SOURCES:-/etc/apt/sources.list.d/debian.sources}

# Print the deb822 stanza of $DEBIAN_SOURCES whose Suites contain the bare
# codename (not -security/-updates only stanzas) and whose Types contain
# "deb". Comment lines are dropped; continuation lines are kept.
debian_main_stanza() {
    local codename
    codename=$(os_codename)
    [[ -r $DEBIAN_SOURCES ]] || die "$DEBIAN_SOURCES not found; cannot derive the Debian mirror"
    awk -v want="$codename" '
        function flush() {
            if (buf != "" && types_ok && suite_ok && !done) { printf "%s", buf; done = 1 }
            buf = ""; types_ok = 0; suite_ok = 0
        }
        /^[ \t]*#/ { next }
        /^[ \t]*$/ { flush(); next }
        {
            buf = buf $0 "\n"
            if (tolower($1) == "types:") { for (i = 2; i <= NF; i++) if ($i == "deb") types_ok = 1 }
            if (tolower($1) == "suites:") { for (i = 2; i <= NF; i++) if ($i == want) suite_ok = 1 }
        }
        END { flush(); if (!done) exit 1 }
    ' "$DEBIAN_SOURCES" || die "no stanza with Types: deb and Suites: $codename in $DEBIAN_SOURCES"
}

# The first URI of the main stanza, e.g. for debootstrap.
debian_mirror() {
    debian_main_stanza | awk 'tolower($1) == "uris:" { print $2; exit }'
}

# The Signed-By keyring of the main stanza when it is a file path (deb822 may
# also embed the key inline; then print nothing and let callers default).
debian_keyring() {
    debian_main_stanza | awk 'tolower($1) == "signed-by:" && $2 ~ /^\// { print $2; exit }'
}

# The main stanza rewritten for another suite (e.g. sid), binary only.
debian_stanza_for_suite() {
    local suite=$1
    debian_main_stanza | awk -v suite="$suite" '
        tolower($1) == "types:" { print "Types: deb"; next }
        tolower($1) == "suites:" { print "Suites: " suite; next }
        { print }
    '
}

# Print the named packages that are not fully installed ("ii"), one a line.
missing_packages() {
    local out p
    # dpkg-query exits non-zero for unknown packages; we only want the list.
    out=$(dpkg-query -W -f='${db:Status-Abbrev} ${Package}\n' "$@" 2>/dev/null || true)
    for p in "$@"; do
        grep -q "^ii  *${p}\$" <<<"$out" || printf '%s\n' "$p"
    done
}

# Multiarch triplet and dynamic loader name of this machine.
multiarch() {
    case $(uname -m) in
    x86_64) printf 'x86_64-linux-gnu\n' ;;
    aarch64) printf 'aarch64-linux-gnu\n' ;;
    *) die "unsupported architecture $(uname -m)" ;;
    esac
}
ldso_name() {
    case $(uname -m) in
    x86_64) printf 'ld-linux-x86-64.so.2\n' ;;
    aarch64) printf 'ld-linux-aarch64.so.1\n' ;;
    *) die "unsupported architecture $(uname -m)" ;;
    esac
}
