"""Tools' output lines as the build log and the progress line show them."""

from envbuild.build.progress import clean_line


def test_a_spinner_redrawn_line_keeps_its_final_text_without_colour_codes() -> None:
    raw = "\x1b[2K\u28fe Cotainr:-: Creating Singularity Sandbox...\r\x1b[2K\u28fd Cotainr:-: Creating Singularity Sandbox...done\n"
    assert clean_line(raw) == "Cotainr:-: Creating Singularity Sandbox...done"


def test_plain_lines_are_kept() -> None:
    assert clean_line("Collecting six==1.16.0\n") == "Collecting six==1.16.0"
