"""Tools' output lines as the build log and the progress line show them."""

from envbuild.shared.progress import clean_line


def test_a_spinner_redrawn_line_keeps_its_final_text_without_colour_codes() -> None:
    raw = "\x1b[2K\u28fe Cotainr:-: Creating Singularity Sandbox...\r\x1b[2K\u28fd Cotainr:-: Creating Singularity Sandbox...done\n"
    assert clean_line(raw) == "Cotainr:-: Creating Singularity Sandbox...done"


def test_plain_lines_are_kept() -> None:
    assert clean_line("Collecting six==1.16.0\n") == "Collecting six==1.16.0"


def test_the_table_of_steps_says_what_ran_and_what_the_store_had() -> None:
    from envbuild.shared.progress import StepRecord, render_summary

    table = render_summary([StepRecord("base 1/2", "debootstrap bookworm", 0.0, cached=True),
                            StepRecord("build 1/9", "Python env layer: create the venv and install " + "x" * 40, 19.64, cached=False)])
    lines = table.splitlines()
    assert lines[0] == "steps: 1 ran, 1 from the store"
    assert lines[1].startswith("  base 1/2   debootstrap bookworm") and lines[1].endswith("from the store")
    assert lines[2].endswith("...    19.6 s")
    assert render_summary([]) == ""


def test_mksquashfs_progress_redraws_become_a_percentage_for_the_live_line() -> None:
    from envbuild.shared.progress import progress_bar

    assert progress_bar("[=========\\          ] 300/458  65%") == "65% (300/458 blocks)"
    assert progress_bar("[===============================|] 458/458 100%") == "100% (458/458 blocks)"
    assert progress_bar("Creating 4.0 filesystem on x.sqsh, block size 131072.") is None
    assert progress_bar("[notes] 12 packages") is None
