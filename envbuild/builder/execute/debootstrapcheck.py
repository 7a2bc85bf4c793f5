"""Before the base step runs debootstrap: whether it can run here, and if not, a fix the user can follow.

debootstrap needs root (it refuses to start otherwise), and Debian installs it in /usr/sbin, which is not on an
ordinary user's PATH: a user without root sees it "not installed" while it is, and no install would help them.
What works without root is a base that is already an image (docker://, oras://, localimage:)."""

from __future__ import annotations

import os
import shutil

# Where Debian's package puts it, and where `which` as a user does not look.
SYSTEM_DIRS = ("/usr/sbin", "/sbin", "/usr/local/sbin")

IMAGE_BASE_FIX = ("start from an image, which needs no root: write `base: docker://python:3.12-slim` in the spec "
                  "(Debian with Python), or `base: localimage:base.sif` for an image file you have "
                  "(e.g. made by `apptainer pull base.sif docker://...`)")


def debootstrap_problem(argv: tuple[str, ...]) -> tuple[str, str] | None:
    """(what is wrong, the fix) when the debootstrap command `argv` cannot run on this host as this user;
    None when it can."""
    suite = next((word for word in argv[1:] if not word.startswith("-")), "")
    base = f"a `debootstrap:{suite}` base" if suite else "a debootstrap base"
    on_path = shutil.which(argv[0])
    installed = on_path or shutil.which("debootstrap", path=os.pathsep.join(SYSTEM_DIRS))
    if os.geteuid() != 0:
        if installed:
            return (f"{base} is made by debootstrap ({installed}), which needs root; this build runs as {_user()}",
                    f"{IMAGE_BASE_FIX}; or run the build as root")
        return (f"{base} is made by debootstrap, which needs root and is not installed here; this build runs as "
                f"{_user()}", f"{IMAGE_BASE_FIX}; or, as root, apt-get install debootstrap and run the build as root")
    if on_path:
        return None
    if installed:
        directory = os.path.dirname(installed)
        return (f"debootstrap is installed ({installed}) but {directory} is not on PATH",
                f'add it: export PATH="$PATH:{directory}"; or {IMAGE_BASE_FIX}')
    return "debootstrap is not installed", f"apt-get install debootstrap; or {IMAGE_BASE_FIX}"


def _user() -> str:
    import pwd

    uid = os.geteuid()
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"
