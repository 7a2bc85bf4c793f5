"""Errors about one image: they name the file, so a listing of many images can report each and go on."""

from __future__ import annotations

from envbuild.errors import EnvbuildError


class ImageFormatError(EnvbuildError):
    """The file is not a SIF image, or it is truncated or damaged, or uses something we cannot read."""

    def __init__(self, path: str, message: str, hint: str | None = None) -> None:
        super().__init__(f"{path}: {message}", hint)
        self.path = path
        self.reason = message
