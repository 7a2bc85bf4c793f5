"""Errors about one image: they name the file, so a listing of many images can report each and go on."""

from __future__ import annotations

from envbuild.errors import EnvbuildError
from envbuild.terminaltext import printable


class ImageFormatError(EnvbuildError):
    """The file is not a SIF image, or it is truncated or damaged, or uses something we cannot read.
    The message may quote the image (a record's field, a path inside it): it is kept printable, whichever
    command prints it."""

    def __init__(self, path: str, message: str, hint: str | None = None) -> None:
        super().__init__(printable(f"{path}: {message}"), None if hint is None else printable(hint))
        self.path = path
        self.reason = printable(message)
