"""The release numbers in a version as tools print it, the one reading of versions that envbuild compares: a
Slurm's (`slurm 23.11.4`, `slurm-wlm 22.05.8`), a container runtime's (`apptainer version 1.4.5-1.el9`), torch's
(`2.11.0+rocm7.0`, `2.12.0a0+git1234`), a CUDA or HIP version (`6.2.41133-dd7f95766`). Only the leading
release numbers count: a local or pre-release part ends them, so a comparison never reads a build number as a
release. Light (no `re`): envrun reads srun's and torch's versions on its way to exec."""

from __future__ import annotations


def release_numbers(text: str) -> tuple[int, ...] | None:
    """The numbers a version starts with: '23.11.10' -> (23, 11, 10), 'v1.4.5-rc.1' -> (1, 4, 5),
    '2.12.0a0+git1234' -> (2, 12, 0); None when it starts with no number."""
    numbers: list[int] = []
    for part in text.strip().removeprefix("v").split("."):
        digits = ""
        for char in part:
            if not char.isdigit():
                break
            digits += char
        if not digits:
            break
        numbers.append(int(digits))
        if len(digits) < len(part):  # '0a0', '0+rocm7', '5-1.el9': the release part ends here
            break
    return tuple(numbers) or None


def release_in(line: str) -> tuple[int, ...] | None:
    """The release numbers of the first word of `line` that is a version ('slurm 23.11.4' -> (23, 11, 4));
    None when no word is."""
    for word in line.split():
        numbers = release_numbers(word)
        if numbers is not None:
            return numbers
    return None


def version_word(line: str) -> str:
    """The first word of `line` that is a version of at least major.minor ('slurm 22.05.8' -> '22.05.8'); ''
    when none is."""
    return next((word for word in line.split() if len(release_numbers(word) or ()) >= 2), "")


def at_least(found: str, minimum: str) -> bool:
    """Whether version `found` is `minimum` or newer (both read by release_numbers; missing parts are 0). A
    version that cannot be read is never new enough."""
    have, need = release_numbers(found), release_numbers(minimum)
    if have is None or need is None:
        return False
    width = max(len(have), len(need))
    return have + (0,) * (width - len(have)) >= need + (0,) * (width - len(need))
