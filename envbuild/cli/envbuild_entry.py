"""The `envbuild` program: a build whose output is up to date is answered by the light check
(envbuild.commands.uptodate) before click and the spec's models are imported, and the usual `envbuild packages`
line by envbuild.cli.packages_entry, without click; everything else goes to the click front end,
envbuild.cli.envbuild_main."""

from __future__ import annotations

import sys


def main() -> None:
    if sys.argv[1:2] == ["packages"]:
        from envbuild.cli.packages_entry import answer_packages

        answer_packages(sys.argv[1:])  # exits where it answered; click reads any other line
    from envbuild.commands.uptodate import answer_if_up_to_date, may_be_a_noop

    if may_be_a_noop(sys.argv[1:]) and answer_if_up_to_date(sys.argv[1:], sys.stderr):
        from envbuild.shared.errors import EXIT_CLEAN

        raise SystemExit(EXIT_CLEAN)
    from envbuild.cli.envbuild_main import main as click_main

    click_main()
