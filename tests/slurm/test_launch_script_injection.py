"""No user value can inject into the other scripts envbuild and envrun write (issue 28): the `envrun
--dry-run` script, the run wrappers next to an image (bin/python, ...) and the image's environment script.

The same hostile strings as the batch script (tests/support/hostile_text.py) go in as command words, the image
and overlay paths, bind and working directories, env values and names of the venv's commands; each script
runs under real sh/bash with a stand-in apptainer that records its argv and environment. Nothing may run (no
PWNED file) and every value arrives byte for byte. A value's newline travels inside a quoted word here (these
scripts carry the words as the real launch does), except where the value is a path in a one-line field."""

from __future__ import annotations

import copy
import os
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from envbuild.builder.plan.record import env_script
from envbuild.host.runtime import Runtime
from envbuild.launch.launchplan import LaunchRequest, plan_launch
from envbuild.launch.launchrequest import LaunchPlan
from envbuild.launch.wrappers import render_wrapper
from envbuild.recipes.loadrecipe import load_recipe
from envbuild.shared.errors import UsageError
from tests.support.hostile_text import (
    MARKER,
    NEWLINES,
    file_name,
    hostile_strings,
    install_stubs,
    marker_files,
    read_records,
)
from tests.support.launch_allocations import HOST
from tests.support.script_shape import bash_syntax_problem, shape_problems

STUB_DIR = f"runtime $(touch {MARKER}) 'q\" `x`"  # the container runtime's directory, itself hostile
CASES = [*hostile_strings(40), *NEWLINES]


def bind_safe(text: str) -> str:
    """`text` without what a bind spec gives a meaning (`:` separates, `,` lists options)."""
    return text.replace(":", "_").replace(",", "_")


def run(argv: list[str], cwd: Path, root: Path, record_env: list[str]) -> subprocess.CompletedProcess[bytes]:
    env = {"PATH": f"{root / STUB_DIR}{os.pathsep}/usr/bin:/bin", "HOME": str(root), "RECORD": str(root / "calls"),
           "RECORD_ENV": " ".join(record_env), "LC_ALL": "C.UTF-8"}
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, timeout=60, check=False)


def dry_run_plan(text: str, root: Path) -> LaunchPlan:
    """The plan of a launch made of `text`: command words, image, working and bound directories, an env value,
    a note and a warning; the directories exist under `root`."""
    cwd = root / f"cwd {file_name(bind_safe(text), 'cwd')}"
    cwd.mkdir(parents=True)
    bound = root / f"data {file_name(bind_safe(text), 'data')}"
    bound.mkdir()
    return plan_launch(LaunchRequest(
        command=("python", "train.py", text, "--flag", text), image=str(root / f"{file_name(text)}.sif"),
        recipe=load_recipe("local"), runtime=Runtime(str(root / STUB_DIR / "apptainer"), "apptainer"), cwd=str(cwd),
        binds=(str(bound),), env=(("HOSTILE_VALUE", text),), host=HOST, notes=(f"a note: {text}",),
        warnings=(f"a warning: {text}",),
    ))


def check_the_dry_run(text: str, tmp_path: Path) -> None:
    install_stubs(tmp_path / STUB_DIR, ("apptainer",))
    plan = dry_run_plan(text, tmp_path)
    script = plan.script()
    syntax = bash_syntax_problem(script)
    assert syntax is None, f"bash -n: {syntax}"
    problems = shape_problems(script, dry_run_plan("v", tmp_path / "twin").script())
    assert not problems, "a value broke a line:\n" + "\n".join(problems[:5])
    cwd = plan.argv[plan.argv.index("--pwd") + 1]
    done = run(["bash", "-c", script, "dry-run"], Path(cwd), tmp_path, ["APPTAINERENV_HOSTILE_VALUE"])
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    assert marker_files(tmp_path) == []
    (call,) = read_records(tmp_path / "calls")
    assert call[: len(plan.argv)] == ["apptainer", *plan.argv[1:]]
    # what the runtime got, against what went in (not against the plan's own copy of it): byte for byte
    assert call[len(plan.argv) - 5: len(plan.argv)] == ["python", "train.py", text, "--flag", text]
    (recorded,) = call[len(plan.argv):]
    name, _, value = recorded.partition("=")
    assert name == "APPTAINERENV_HOSTILE_VALUE" and as_apptainer_sets(value, tmp_path) == text
    assert marker_files(tmp_path) == []


def as_apptainer_sets(value: str, cwd: Path) -> str:
    """What apptainer makes of an APPTAINERENV_ value: it expands it as a here-document's text ($, ` and \\
    are special, quotes are not), which bash does the same way."""
    end = "ENVRUN_TEST_END_OF_VALUE"
    done = subprocess.run(["bash", "-c", f"cat <<{end}\n{value}\n{end}\n"], cwd=cwd, capture_output=True,
                          timeout=30, check=True)
    return done.stdout.decode("utf-8", "surrogateescape").removesuffix("\n")


@pytest.mark.parametrize("text", CASES, ids=lambda text: repr(text)[:40])
def test_the_dry_run_script_runs_exactly_the_plan(text: str, tmp_path: Path) -> None:
    check_the_dry_run(text, tmp_path)


SHAPE = "a value broke a line|bash -n"


@pytest.mark.parametrize(("broken", "text", "message"), [
    ("shlex.quote", f"$(touch {MARKER})", SHAPE), ("shlex.quote", "a b", SHAPE), ("shlex.quote", "it's", SHAPE),
    ("envbuild.shared.shelltext.comment", f"a\ntouch {MARKER}", SHAPE),
    ("envbuild.launch.launchplan.shell_evaluated_literally", "$HOME-x", None),  # the value the program sees
], ids=repr)
def test_the_dry_run_guard_fails_when_the_quoting_is_broken(broken: str, text: str, message: str | None,
                                                            tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The checks above are shown to fail: with the script's quoting (its comments' escaping, the escaping
    of a value for apptainer's evaluation) broken on purpose, the value that broke out is found."""
    monkeypatch.setattr(broken, lambda value: f"# {value}" if broken.endswith("comment") else value)
    with pytest.raises(AssertionError, match=message):
        check_the_dry_run(text, tmp_path)


@pytest.mark.parametrize("name", ["A;B", "A B", "FOO\n", "1X", "", "A=B", "É"])
def test_the_dry_run_script_refuses_a_name_that_is_not_a_variable(name: str) -> None:
    with pytest.raises(UsageError, match="is not a variable name"):
        LaunchPlan(argv=("apptainer",), env=((name, "x"),), unset=(), reasons=()).script()
    with pytest.raises(UsageError, match="is not a variable name"):
        LaunchPlan(argv=("apptainer",), env=(), unset=(name,), reasons=()).script()


def test_a_reason_with_a_newline_stays_a_comment() -> None:
    script = LaunchPlan(argv=("true",), env=(), unset=(), reasons=(f"cwd /w\ntouch {MARKER}",),
                        warnings=("w\r\x1b[2J",)).script()
    assert f"# cwd /w\\ntouch {MARKER}\n" in script and "# warning: w\\r\\x1b[2J\n" in script


@pytest.mark.parametrize("text", CASES, ids=lambda text: repr(text)[:40])
def test_a_run_wrapper_passes_every_value_through(text: str, tmp_path: Path) -> None:
    install_stubs(tmp_path / STUB_DIR, ("apptainer",))
    recipe = copy.copy(load_recipe("local"))
    literal = text.replace("$", "S")  # a recipe value with $ is expanded in each task, on purpose
    object.__setattr__(recipe, "env", {"HOSTILE_ENV": literal})
    image = str(tmp_path / f"{file_name(text)}.sif")
    overlay = str(tmp_path / f"{file_name(bind_safe(text))}.sqsh")
    command = file_name(text, "python")
    if "\n" in text or "\r" in text:
        with pytest.raises(UsageError, match="holds a"):
            render_wrapper(command, image, recipe, overlays=((overlay, "/user-software"),))
        return
    wrapper = tmp_path / "bin" / "wrapper"
    wrapper.parent.mkdir()
    wrapper.write_text(render_wrapper(command, image, recipe, overlays=((overlay, "/user-software"),)))
    cwd = tmp_path / f"cwd {file_name(bind_safe(text), 'cwd')}"
    cwd.mkdir()
    arguments = [text, "--x", text, "", "-"]
    done = run(["sh", str(wrapper), *arguments], cwd, tmp_path, ["HOSTILE_ENV"])
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    assert marker_files(tmp_path) == []
    (call,) = read_records(tmp_path / "calls")
    assert call[0] == "apptainer" and call[-1] == f"HOSTILE_ENV={literal}"
    argv = call[1:-1]
    assert argv[-len(arguments) - 1:] == [command, *arguments]
    assert argv.count(image) == 1 and argv[argv.index("--pwd") + 1] == str(cwd)
    assert f"{overlay}:/user-software:image-src=/,ro" in argv


def fake_spec(name: str, env: dict[str, str]) -> SimpleNamespace:
    """What env_script reads of a spec: its name, env, env_shell and where its packages go (envbuild's venv)."""
    return SimpleNamespace(name=name, env=env, env_shell=None, python=SimpleNamespace(target="envbuild-venv"))


@pytest.mark.parametrize("text", CASES, ids=lambda text: repr(text)[:40])
def test_the_image_env_script_sets_each_value_literally(text: str, tmp_path: Path) -> None:
    spec = fake_spec(name=text, env={"HOSTILE": text, "OTHER": "x"})
    script = tmp_path / "90-envbuild.sh"
    script.write_text(env_script(spec, "1", "0" * 64))  # type: ignore[arg-type]
    out = tmp_path / "value"
    done = subprocess.run(["sh", "-c", '. "$1"; printf %s "$HOSTILE" > "$2"', "sh", str(script), str(out)],
                          cwd=tmp_path, capture_output=True, timeout=30, check=False)
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    assert out.read_bytes() == text.encode("utf-8", "surrogateescape")
    assert marker_files(tmp_path) == []
    assert script.read_text().splitlines()[0].startswith("# Written by envbuild 1 for ")


@pytest.mark.parametrize("name", ["FOO\n", "A;B", "A B", "1X", "A-B"])
def test_the_image_env_script_refuses_a_name_that_is_not_a_variable(name: str) -> None:
    with pytest.raises(UsageError, match=r"env: .* is not a variable name"):
        env_script(fake_spec(name="x", env={name: "v"}), "1", "0" * 64)  # type: ignore[arg-type]


CLI_CASES = [f"$(touch {MARKER})", f"`touch {MARKER}`", "a'b\"c\\d", "${IFS}*~", "-n", "", "é\u202e", "a\nb"]


@pytest.mark.parametrize("text", CLI_CASES, ids=repr)
def test_envrun_dry_run_from_the_command_line(text: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    """`envrun --dry-run` as typed: its script, run with the stand-in runtime first on PATH, gives the runtime
    the command's words as typed."""
    from envbuild.cli import envrun_main

    install_stubs(tmp_path / STUB_DIR, ("apptainer",))
    image = tmp_path / f"{file_name(text, 'env')}.sif"
    image.write_bytes(b"not read by a dry run")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", f"{tmp_path / STUB_DIR}{os.pathsep}/usr/bin:/bin")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("ENVBUILD_CACHE_DIR", str(tmp_path / "cache" / "envbuild"))
    for name in [n for n in os.environ if n.startswith(("SLURM_", "ENVRUN_"))]:
        monkeypatch.delenv(name)
    try:
        envrun_main.main(["--system", "local", "--image", str(image), "--dry-run", "python", "train.py", text])
    except SystemExit as exc:
        assert exc.code in (0, None), capsys.readouterr().err
    script = capsys.readouterr().out
    done = run(["bash", "-c", script, "dry-run"], tmp_path, tmp_path, [])
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    assert marker_files(tmp_path) == []
    (call,) = read_records(tmp_path / "calls")
    assert call[0] == "apptainer" and call[-3:] == ["python", "train.py", text] and str(image) in call


def test_a_runscript_verdict_shows_the_image_words_escaped() -> None:
    """The verdict names paths from the image; --explain prints it and the scripts' comments carry it."""
    from envbuild.launch.runscript import classify_runscript

    runscript = "#!/bin/sh\n. /opt/env\x1b[2J/bin/activate\nexec \"$@\"\n"
    entrypoint = "OCI_ENTRYPOINT='\"/entry\x1b]0;title\x07\"'\n"
    for text in (runscript, entrypoint):
        verdict = classify_runscript(text, lambda _path: None)
        assert verdict is not None and "\x1b" not in verdict[1] and "\\x1b" in verdict[1], verdict
