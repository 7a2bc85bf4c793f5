"""One vocabulary for both tools (issue 31): renamed options keep their old spelling as a hidden alias with a
one-line note, one duration grammar for --time, the exit contract in the help, and the options both tools share
shown with the same names, metavar and help in every --help that has them."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from envbuild.cli import doctor_cmd, envrun_main, sbatch_cmd, sweep_cmd
from envbuild.cli.envbuild_main import main as envbuild_main
from envbuild.cli.options import SHARED, SharedOption, add_option, add_renamed, help_text
from tests.cli.test_sbatch_cmd import project, run  # noqa: F401 - the fixture is used by name (usefixtures)

# ------------------------------------------------------------------------------------------- renamed options


@pytest.mark.parametrize(("old", "new"), [
    (["--script", "job.sbatch"], ["-o", "job.sbatch"]),
    (["--script", "job.sbatch"], ["--output", "job.sbatch"]),
    (["--print"], ["--dry-run"]),
    (["--log", "logs/%x-%j.txt"], ["--job-output", "logs/%x-%j.txt"]),
])
@pytest.mark.usefixtures("project")
def test_an_old_spelling_does_what_the_new_one_does_and_says_so(capsys: pytest.CaptureFixture[str], old: list[str],
                                                                 new: list[str]) -> None:
    here = Path.cwd()
    command = ["--system", "local", "--", "python", "train.py"]
    assert run([*new, *command]) == 0
    new_out, new_err = capsys.readouterr()
    written_new = (here / "job.sbatch").read_text() if "job.sbatch" in new else ""
    assert run([*old, *command]) == 0
    old_out, old_err = capsys.readouterr()
    written_old = (here / "job.sbatch").read_text() if "job.sbatch" in old else ""
    notes = [line for line in old_err.splitlines() if "note:" in line]
    assert notes == [f"envrun sbatch: note: {old[0]} is now {'/'.join(_names(new[0]))}; {old[0]} still works but will go"]
    assert "note:" not in new_err
    assert _without_regenerate(old_out) == _without_regenerate(new_out)
    assert _without_regenerate(written_old) == _without_regenerate(written_new)
    if "--job-output" in new:
        assert "#SBATCH --output=logs/%x-%j.txt" in new_out


def _names(option: str) -> tuple[str, ...]:
    return next(shared.names for shared in SHARED.values() if option in shared.names)


def _without_regenerate(script: str) -> str:
    """The script less the line that records the command line it was made by (which names the spelling used)."""
    return "\n".join(line for line in script.splitlines() if "envrun sbatch" not in line)


@pytest.mark.usefixtures("project")
def test_the_old_spellings_stay_exclusive_with_the_modes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        envrun_main.main(["sbatch", "--print", "--submit", "--", "python", "train.py"])
    assert done.value.code == 2 and "not allowed with argument" in capsys.readouterr().err


def test_sweep_report_is_now_output() -> None:
    parsed = sweep_cmd.build_parser().parse_args(["--nodes", "1", "-o", "runs/a", "--", "python", "t.py"])
    assert parsed.output == "runs/a"
    assert sweep_cmd.build_parser().parse_args(["--nodes", "1", "--report", "runs/b", "--", "python", "t.py"]).output == "runs/b"


def test_add_renamed_takes_flags_and_values() -> None:
    parser = argparse.ArgumentParser(prog="t")
    flag, value = SharedOption(("--new-flag",), None, "a flag"), SharedOption(("--new",), "X", "a value")
    add_option(parser, flag, dest="flag")
    add_renamed(parser, "--old-flag", flag, dest="flag")
    add_option(parser, value, dest="value")
    add_renamed(parser, "--old", value, dest="value")
    assert vars(parser.parse_args([])) == {"flag": False, "value": None}
    assert vars(parser.parse_args(["--old-flag", "--old", "v"])) == {"flag": True, "value": "v"}
    assert "--old" not in parser.format_help()


# ------------------------------------------------------------------------------------------- durations


@pytest.mark.usefixtures("project")
def test_sbatch_time_takes_2h(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["--system", "local", "--time", "2h", "--", "python", "train.py"]) == 0
    assert "#SBATCH --time=02:00:00" in capsys.readouterr().out
    assert run(["--system", "local", "-t", "90s", "--", "python", "train.py"]) == 0
    assert "#SBATCH --time=00:01:30" in capsys.readouterr().out


@pytest.mark.parametrize(("given", "seconds"), [("100", 100), ("100s", 100), ("2m", 120)])
def test_sbatch_signal_before_takes_the_grammar_with_bare_seconds(given: str, seconds: int) -> None:
    parsed = sbatch_cmd.build_parser().parse_args(["--signal-before", given, "--", "python", "t.py"])
    assert parsed.signal_before == seconds
    assert sbatch_cmd.build_parser().parse_args(["--", "python", "t.py"]).signal_before == 90


def test_sbatch_signal_before_outside_the_grammar_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        sbatch_cmd.build_parser().parse_args(["--signal-before", "soon", "--", "python", "t.py"])
    err = capsys.readouterr().err
    assert done.value.code == 2
    assert "argument --signal-before: 'soon' is not a duration; fix: write it as 90s, 30m" in err


@pytest.mark.usefixtures("project")
def test_sbatch_time_that_is_no_duration_is_a_located_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["--system", "local", "--time", "soon", "--", "python", "train.py"]) == 2
    err = capsys.readouterr().err
    assert "error: --time: 'soon' is not a duration" in err and "fix: write it as 90s, 30m, 2h" in err


@pytest.mark.parametrize(("argv", "message"), [
    (["--heartbeat", "soon"], "Invalid value for '--heartbeat': 'soon' is not a duration"),
    (["--compression", "bogus"], "Invalid value for '--compression': unknown squashfs compression 'bogus'"),
])
def test_a_bad_value_read_by_a_click_callback_is_a_usage_error_not_a_traceback(argv: list[str], message: str) -> None:
    result = CliRunner().invoke(envbuild_main, ["build", "spec.yaml", *argv])
    assert result.exception is None or isinstance(result.exception, SystemExit), "no traceback"
    assert result.exit_code == 2 and message in result.output and "fix: " in result.output


def test_heartbeat_takes_the_grammar_with_bare_seconds(tmp_path: Path) -> None:
    from envbuild.cli.envbuild_main import _heartbeat

    assert [_heartbeat(text) for text in ("30", "30s", "2m", "0")] == [30.0, 30.0, 120.0, 0.0]
    result = CliRunner().invoke(envbuild_main, ["build", str(tmp_path / "none.yaml")], env={"ENVBUILD_HEARTBEAT": "2m"})
    assert result.exit_code == 2 and "none.yaml: no such file" in result.output, "the value passed, the spec is missing"


# ------------------------------------------------------------------------------------------- help texts


def test_envrun_help_lists_every_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        envrun_main.main(["--help"])
    out = capsys.readouterr().out
    for name, subcommand in envrun_main.SUBCOMMANDS.items():
        assert re.search(rf"^  {re.escape(name)} +{re.escape(subcommand.summary[:30])}", out, re.MULTILINE), name
    assert "exit status:" in out


def test_every_help_says_the_exit_contract() -> None:
    for parser in (envrun_main.build_parser(), sbatch_cmd.build_parser(), sweep_cmd.build_parser(),
                   doctor_cmd.build_parser()):
        assert "2  usage error" in parser.format_help()
    for command in (["--help"], ["validate", "--help"], ["verify", "--help"], ["build", "--help"], ["cache", "--help"]):
        assert "2  usage error" in _click_help(command)


def test_compression_help_says_what_each_choice_means_without_figures() -> None:
    """Figures age: the measurements behind the choices are in docs/reports/performance.md."""
    import re

    text = _click_help(["build", "--help"])
    help_text = text[text.index("--compression"):text.index("--layered")]
    assert all(name in help_text for name in ("gzip", "zstd", "lz4", "xz", "gzip:N"))
    assert not re.search(r"\d+(\.\d+)?x\b|%", help_text), help_text


def _click_help(argv: list[str]) -> str:
    result = CliRunner().invoke(envbuild_main, argv, terminal_width=2000)
    assert result.exit_code == 0, result.output
    return result.output


def _argparse_helps() -> dict[str, str]:
    helps = {}
    for parser in (envrun_main.build_parser(), sbatch_cmd.build_parser(), sweep_cmd.build_parser(),
                   doctor_cmd.build_parser()):
        parser.formatter_class = lambda prog: argparse.RawDescriptionHelpFormatter(prog, max_help_position=200,
                                                                                   width=2000)
        helps[parser.prog] = parser.format_help()
    return helps


def _option_lines(text: str) -> dict[str, str]:
    """'--system NAME' -> its help, from a --help where an option's help follows it on its line or the next."""
    lines = text.splitlines()
    found = {}
    for index, line in enumerate(lines):
        match = re.match(r"^ {2,}(-[^ ,]+(?: [^ ,]+)?(?:, -[^ ,]+(?: [^ ,]+)?)*)(?: {2,}(.*))?$", line)
        if not match:
            continue
        description = match.group(2) or (lines[index + 1].strip() if index + 1 < len(lines) else "")
        for shown in match.group(1).split(", "):
            found[shown] = description
    return found


@pytest.mark.parametrize("key", sorted(SHARED))
def test_a_shared_option_reads_the_same_in_both_tools(key: str) -> None:
    """Every --help that shows a shared option shows it with its metavar and its shared help (a command adds
    a note and its own default after it); the shared ones that both tools have are seen in both."""
    option = SHARED[key]
    long_name = next(name for name in option.names if name.startswith("--"))
    helps = {**_argparse_helps(), **{f"envbuild {' '.join(c)}": _click_help([*c, "--help"]) for c in _click_commands()}}
    seen = set()
    for where, text in helps.items():
        for shown, description in _option_lines(text).items():
            if shown.split(" ")[0] != long_name:
                continue
            seen.add("envbuild" if where.startswith("envbuild") else "envrun")
            metavar = shown.split(" ")[1] if " " in shown else None
            assert metavar == option.metavar or (key == "output" and metavar == "DIR"), (where, shown)
            assert description.startswith(option.help), (where, description)
    both = {"system", "overlay", "dry-run", "output", "json"}
    assert seen == ({"envbuild", "envrun"} if key in both else seen) and seen, (key, seen)


def _click_commands() -> list[list[str]]:
    group = envbuild_main
    names = []
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if isinstance(command, click.Group):
            names += [[name, sub] for sub in command.list_commands(ctx)]
        else:
            names.append([name])
    return names


def test_help_text_puts_note_and_default_after_the_shared_words() -> None:
    option = SharedOption(("--x",), "X", "the x", "one")
    assert help_text(option) == "the x (default: one)"
    assert help_text(option, note="here", default_help="two") == "the x; here (default: two)"
