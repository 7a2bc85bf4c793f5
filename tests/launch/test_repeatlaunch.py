"""The repeat launch without Python (envbuild/launch/repeatlaunch.c, the file envbuild.launch.repeatplan writes).

The program is compiled here from the checkout's source with the warnings as errors. Every test drives it as
bin/envrun does (`envrun-repeat SELF N FALLBACK... ARGS...`), with a plan whose "program" and whose Python
fallback each print what they were started with, so a test sees which of the two ran, with which arguments and
environment. The independent truth for every verdict is envbuild.launch.plancache.facts_hold, the check the
Python launch makes: a grammar of file trees, facts and changes (hypothesis) asserts that the C program execs
the plan exactly when Python's check says every fact still holds. The cache file is checked as usercache checks
its own (another's, writable by others, a link, a foreign key, any truncation or flipped byte: Python plans)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envbuild.launch import plancache, repeatplan
from envbuild.launch.plancache import PSEUDO_FILE_ROOTS, facts_hold, observe
from tests.conftest import REPO

SOURCE = REPO / "envbuild/launch/repeatlaunch.c"
# What the plan and the fallback run: their name, their arguments and the environment, as JSON on stdout.
REPORT = "import json, os, sys; print(json.dumps({'ran': sys.argv[1], 'args': sys.argv[2:], 'env': dict(os.environ)}))"


@pytest.fixture(scope="module")
def repeat_program(tmp_path_factory: pytest.TempPathFactory) -> Path:
    compiler = shutil.which("cc")
    assert compiler, "no C compiler: provision/install.sh installs gcc and libc6-dev"
    target = tmp_path_factory.mktemp("repeat") / "envrun-repeat"
    subprocess.run([compiler, "-O2", "-std=c11", "-Wall", "-Wextra", "-Wpedantic", "-Wshadow", "-Wconversion",
                    "-Werror", "-o", str(target), str(SOURCE)], check=True, capture_output=True, text=True)
    return target


# Every run says on stderr why it falls back (what a failing assertion shows).
TRACE = {"ENVRUN_REPEAT_TRACE": "1"}


class Stage:
    """A checkout's launcher (SELF = ROOT/bin/envrun), the user's private cache, and a working directory."""

    def __init__(self, tmp: Path, program: Path) -> None:
        self.tmp = tmp
        self.program = program
        self.launcher = tmp / "checkout" / "bin" / "envrun"
        self.launcher.parent.mkdir(parents=True)
        self.launcher.write_text("#!/bin/sh\n")
        self.cwd = tmp / "work"
        self.cwd.mkdir()
        self.cache = tmp / "cache"
        self.env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp / "home"), "XDG_CACHE_HOME": str(self.cache),
                    "LANG": "C.UTF-8"}

    def launch_env(self, env: dict[str, str]) -> dict[str, str]:
        """The environment as bin/envrun's Python program has it when the facts are recorded: the checkout
        first on $PYTHONPATH."""
        here = str(self.launcher.parent.parent)
        old = env.get("PYTHONPATH")
        return {**env, **TRACE, "PYTHONPATH": here + (":" + old if old else "")}

    def keep(self, args: list[str], facts: list[tuple[Any, ...]], *, env: dict[str, str] | None = None,
             argv: list[str] | None = None, settings_: list[tuple[str, str]] | None = None,
             unset: list[str] | None = None, warnings: list[str] | None = None, cwd: Path | None = None) -> Path:
        """Write the repeat plan for `args` as envbuild.launch.repeatplan writes it; its path."""
        key = repeatplan.repeat_key(args, str(cwd or self.cwd), str(self.launcher))
        data = repeatplan.repeat_plan_bytes(key, facts, argv or [sys.executable, "-c", REPORT, "plan"],
                                            settings_ or [], unset or [], warnings or [])
        self.cache.mkdir(mode=0o700, exist_ok=True)
        (self.cache / "envrun").mkdir(mode=0o700, exist_ok=True)
        path = self.cache / "envrun" / repeatplan.repeat_slot_name(key)
        path.write_bytes(data)
        path.chmod(0o600)
        return path

    def run(self, args: list[str], env: dict[str, str] | None = None, cwd: Path | None = None) -> dict[str, Any]:
        """What ran (plan or fallback), with which arguments and environment, and what went to stderr."""
        fallback = [sys.executable, "-c", REPORT, "fallback"]
        done = subprocess.run([str(self.program), str(self.launcher), str(len(fallback)), *fallback, *args],
                              capture_output=True, env={**(env or self.env), **TRACE},
                              cwd=cwd or self.cwd, timeout=60)
        assert done.returncode == 0, done.stderr
        result: dict[str, Any] = json.loads(done.stdout)
        result["stderr"] = done.stderr.decode(errors="replace")
        return result


@pytest.fixture
def stage(tmp_path: Path, repeat_program: Path) -> Stage:
    return Stage(tmp_path, repeat_program)


def recorded(questions: list[tuple[Any, ...]], environ: dict[str, str]) -> list[tuple[Any, ...]]:
    """Each question with the answer Python's observe gives now: the facts as a plan records them."""
    return [(*question, observe(question, environ)) for question in questions]


def test_a_kept_plan_is_execed_with_its_variables_and_warnings(stage: Stage) -> None:
    env = {**stage.env, "DROP_ME": "1", "KEEP_ME": "2", "OVERRIDE": "old"}
    facts = recorded([("env", "KEEP_ME"), ("stat", str(stage.cwd)), ("listdir", str(stage.cwd))],
                     stage.launch_env(env))
    stage.keep(["--image", "x.sif", "python", "train.py"], facts, settings_=[("OVERRIDE", "new"), ("ADDED", "3")],
               unset=["DROP_ME"], warnings=["a warning, kept with the plan"])
    result = stage.run(["--image", "x.sif", "python", "train.py"], env)
    assert result["ran"] == "plan", result["stderr"]
    assert "envrun: warning: a warning, kept with the plan" in result["stderr"]
    expected = {name: value for name, value in stage.launch_env(env).items() if name != "DROP_ME"}
    expected.update(OVERRIDE="new", ADDED="3")
    assert result["env"] == expected


def test_the_environment_is_the_one_python_would_exec(stage: Stage, monkeypatch: pytest.MonkeyPatch) -> None:
    """plancache.environment_for (what the Python launch execs with) of the same environment and plan."""
    env = {**stage.env, "PYTHONPATH": "/site/lib", "GONE": "x"}
    stage.keep(["true"], [], settings_=[("A", "1"), ("A", "2"), ("PATH", "/opt/bin:/usr/bin")], unset=["GONE", "A"])
    result = stage.run(["true"], env)
    monkeypatch.setattr(os, "environ", stage.launch_env(env))
    python_would = plancache.environment_for(["GONE", "A"], [("A", "1"), ("A", "2"), ("PATH", "/opt/bin:/usr/bin")])
    assert result["ran"] == "plan"
    assert result["env"] == python_would
    assert result["env"]["PYTHONPATH"] == f"{stage.launcher.parent.parent}:/site/lib"


def test_a_program_without_a_slash_is_found_on_the_plan_s_path(stage: Stage) -> None:
    bin_dir = stage.tmp / "opt-bin"
    bin_dir.mkdir()
    program = bin_dir / "trainer"
    program.write_text(f"#!{sys.executable}\n{REPORT}\n")
    program.chmod(0o755)
    stage.keep(["true"], [], argv=["trainer", "plan"], settings_=[("PATH", f"/nowhere:{bin_dir}")])
    assert stage.run(["true"])["ran"] == "plan"
    stage.keep(["true"], [], argv=["no-such-program-anywhere", "plan"])
    assert stage.run(["true"])["ran"] == "fallback", "a plan that cannot start: Python plans and says why"


@pytest.mark.parametrize("variables", [{"SLURM_JOB_ID": "12"}, {"SLURM_JOBID": "12"}, {"ENVRUN_PLAN_CACHE": "off"},
                                       {"ENVRUN_PLAN_CACHE": "FALSE"}, {"ENVRUN_PLAN_CACHE": "0"}])
def test_in_a_slurm_job_or_switched_off_python_plans(stage: Stage, variables: dict[str, str]) -> None:
    stage.keep(["true"], [])
    result = stage.run(["true"], {**stage.env, **variables})
    assert result["ran"] == "fallback"
    assert result["args"] == ["true"] and "PYTHONPATH" not in result["env"], "the fallback gets what it was given"


def test_another_command_line_or_directory_is_another_plan(stage: Stage) -> None:
    stage.keep(["python", "a.py"], [])
    assert stage.run(["python", "a.py"])["ran"] == "plan"
    assert stage.run(["python", "b.py"])["ran"] == "fallback"
    assert stage.run(["python", "a.py", ""])["ran"] == "fallback"
    elsewhere = stage.tmp / "elsewhere"
    elsewhere.mkdir()
    assert stage.run(["python", "a.py"], cwd=elsewhere)["ran"] == "fallback"


def test_arguments_that_are_not_utf8_are_the_same_bytes(stage: Stage) -> None:
    word = os.fsdecode(b"caf\xe9.py")
    stage.keep(["python", word], [])
    fallback = [sys.executable, "-c", REPORT, "fallback"]
    done = subprocess.run([str(stage.program), str(stage.launcher), str(len(fallback)), *fallback, "python",
                           os.fsencode(word)], capture_output=True, env=stage.env, cwd=stage.cwd, timeout=60)
    assert json.loads(done.stdout)["ran"] == "plan"


def test_a_plan_with_another_key_in_the_same_slot_is_not_execed(stage: Stage) -> None:
    path = stage.keep(["python", "a.py"], [])
    other = repeatplan.repeat_key(["python", "b.py"], str(stage.cwd), str(stage.launcher))
    data = path.read_bytes()
    key = repeatplan.repeat_key(["python", "a.py"], str(stage.cwd), str(stage.launcher))
    path.write_bytes(data.replace(repeatplan.netstring(key), repeatplan.netstring(other)))
    assert stage.run(["python", "a.py"])["ran"] == "fallback"


@pytest.mark.parametrize("change", ["file group-writable", "file others-writable", "directory group-writable",
                                    "file a link", "file a directory", "file another's", "directory another's"])
def test_a_plan_file_that_is_not_the_users_own_and_private_is_not_read(stage: Stage, change: str) -> None:
    path = stage.keep(["true"], [])
    assert stage.run(["true"])["ran"] == "plan"
    if change == "file group-writable":
        path.chmod(0o620)
    elif change == "file others-writable":
        path.chmod(0o602)
    elif change == "directory group-writable":
        path.parent.chmod(0o770)
    elif change == "file a link":
        moved = stage.tmp / "elsewhere.plan"
        path.rename(moved)
        path.symlink_to(moved)
    elif change == "file a directory":
        path.unlink()
        path.mkdir()
    else:
        if os.geteuid() != 0:
            pytest.skip("giving a file to another user needs root (CI runs as root)")
        os.chown(path if change == "file another's" else path.parent, 65534, -1)
    assert stage.run(["true"])["ran"] == "fallback"


def test_a_plan_file_cut_short_or_with_a_byte_changed_never_crashes_the_program(stage: Stage) -> None:
    """Every truncation: Python plans. A flipped byte at every 5th offset: the program never dies of a signal
    (the file is the user's own, so what it says is run when it still parses, as with the marshal plan)."""
    facts = recorded([("stat", str(stage.cwd)), ("env", "HOME"), ("listdir", str(stage.cwd))],
                     stage.launch_env(stage.env))
    path = stage.keep(["true"], facts, settings_=[("A", "1")], unset=["B"], warnings=["w"])
    whole = path.read_bytes()
    for cut in range(len(whole)):
        path.write_bytes(whole[:cut])
        assert stage.run(["true"])["ran"] == "fallback", cut
    for offset in range(0, len(whole), 5):
        changed = bytearray(whole)
        changed[offset] ^= 0x5A
        path.write_bytes(bytes(changed))
        done = subprocess.run([str(stage.program), str(stage.launcher), "1", "/bin/true", "true"],
                              capture_output=True, env=stage.env, cwd=stage.cwd, timeout=60)
        assert done.returncode >= 0, (offset, done.returncode, done.stderr)


def test_the_kinds_the_c_program_asks_are_the_writer_s_and_plancache_s() -> None:
    import re

    asked = set(re.findall(r'!strcmp\(kind, "([a-z_]+)"\)', SOURCE.read_text()))
    assert asked == set(repeatplan.REPEAT_KINDS)
    known = set(re.findall(r'kind == "([a-z_]+)"', Path(plancache.__file__).read_text()))
    assert asked <= known | {"stat", "lstat"}
    assert repeatplan.MAGIC.decode() in SOURCE.read_text()


def test_the_c_program_s_constants_are_python_s() -> None:
    """The facts the C program restates (it cannot import them): each must equal its Python home, or the two
    launches would look in different slots, read files of different sizes or keep plans in different places."""
    import re

    from envbuild.host import usercache

    text = SOURCE.read_text()
    assert int(re.search(r"SLOTS = (\d+);", text)[1]) == plancache.PLAN_SLOTS
    limit = re.search(r"LIMIT = (\d+) << (\d+);", text)
    assert int(limit[1]) << int(limit[2]) == usercache._LIMIT
    off = re.search(r"const char \*off\[\] = \{([^}]*)\};", text)[1]
    assert tuple(re.findall(r'"([^"]*)"', off)) == plancache.SWITCHED_OFF
    assert f'getenv("{plancache.SWITCH}")' in text
    assert 'getenv("SLURM_JOB_ID")' in text and 'getenv("SLURM_JOBID")' in text
    assert '"/envrun"' in text and '"/.cache"' in text and usercache.user_cache_dir({"HOME": "/h"}) == "/h/.cache/envrun"
    assert "repeat-%02x.plan" in text and repeatplan.repeat_slot_name(b"") == "repeat-00.plan"


def test_a_fact_of_a_kind_the_c_program_does_not_ask_means_no_repeat_plan() -> None:
    with pytest.raises(ValueError):
        repeatplan.repeat_plan_bytes(b"k", [("getpwuid", 0, ("root",))], ["true"], [], [], [])
    with pytest.raises(ValueError):
        repeatplan.repeat_plan_bytes(b"k", [("realpath", "/x", "/x")], ["true"], [], [], [])


def _change_table(root: Path, env: dict[str, str]) -> dict[str, tuple[tuple[Any, ...], Any]]:
    """For each kind of fact: its question, and a change (a function) after which its answer differs, most of
    them so that the old answer's rendering is a prefix of the new one (a comparison of lengths is needed)."""
    (root / "file").write_text("x")
    (root / "dir").mkdir()
    (root / "dir" / "a").write_text("")
    (root / "link").symlink_to("a")
    (root / "script").write_text("#!/bin/sh\n")
    (root / "script").chmod(0o755)
    env.update(VALUE="1")

    def append() -> None:
        with (root / "file").open("a") as handle:
            handle.write("y")

    return {
        "env": (("env", "VALUE"), lambda: env.update(VALUE="12")),
        "env unset": (("env", "LATER"), lambda: env.update(LATER="")),
        "stat": (("stat", str(root / "file")), append),
        "stat chmod": (("stat", str(root / "file")), lambda: (root / "file").chmod(0o640)),
        "lstat": (("lstat", str(root / "link")), lambda: ((root / "link").unlink(), (root / "link").symlink_to("ab"))),
        "access": (("access", str(root / "script"), os.X_OK), lambda: (root / "script").chmod(0o644)),
        "listdir": (("listdir", str(root / "dir")), lambda: (root / "dir" / "zz").write_text("")),
        "readlink": (("readlink", str(root / "link")), lambda: ((root / "link").unlink(), (root / "link").symlink_to("ab"))),
        "content": (("content", str(root / "file")), append),
        "names": (("names",), lambda: env.update(ZZZZ="1")),
    }


@pytest.mark.parametrize("kind", ["env", "env unset", "stat", "stat chmod", "lstat", "access", "listdir", "readlink",
                                  "content", "names"])
def test_each_kind_of_fact_that_changes_makes_python_plan(stage: Stage, kind: str) -> None:
    root = stage.tmp / "tree"
    root.mkdir()
    env = dict(stage.env)
    question, change = _change_table(root, env)[kind]
    facts = recorded([question], stage.launch_env(env))
    stage.keep(["run"], facts)
    assert stage.run(["run"], env)["ran"] == "plan"
    change()
    assert not facts_hold(facts, stage.launch_env(env)), "Python's own check must see the change"
    assert stage.run(["run"], env)["ran"] == "fallback"


@pytest.mark.parametrize("kind", ["affinity", "cpu_count", "uname"])
def test_a_host_fact_recorded_otherwise_makes_python_plan(stage: Stage, kind: str) -> None:
    """The CPUs and the kernel cannot change under a test: a recorded answer that is not today's (a prefix of
    it where one can be) stands for a node whose CPUs or kernel differ."""
    now = observe((kind,), {})
    if kind == "affinity":
        other: Any = now[:-1] if len(now) > 1 else (*now, 4096)
    elif kind == "cpu_count":
        other = (now or 1) + 1
    else:
        other = (*now[:-1], now[-1][:-1])
    stage.keep(["run"], [(kind, now)])
    assert stage.run(["run"])["ran"] == "plan"
    stage.keep(["run"], [(kind, other)])
    assert stage.run(["run"])["ran"] == "fallback"


# --- the grammar: trees, facts about them, and a change; the C program's verdict against Python's -------------
NAMES = ("a", "b", "c.yaml", "d")


@st.composite
def trees(draw: st.DrawFn) -> list[tuple[str, str]]:
    """(relative path, what it is: "file" CONTENT, "dir", "link" TARGET)."""
    entries: list[tuple[str, str]] = []
    for name in draw(st.lists(st.sampled_from(NAMES), unique=True, max_size=4)):
        kind = draw(st.sampled_from(["file", "dir", "link"]))
        if kind == "file":
            entries.append((name, "file " + draw(st.text("xyz\n", max_size=5))))
        elif kind == "dir":
            entries.append((name, "dir"))
            for inner in draw(st.lists(st.sampled_from(NAMES), unique=True, max_size=2)):
                entries.append((f"{name}/{inner}", "file " + draw(st.text("xy", max_size=3))))
        else:
            entries.append((name, "link " + draw(st.sampled_from([*NAMES, "missing", "/", ".."]))))
    return entries


def plant(root: Path, tree: list[tuple[str, str]]) -> None:
    for relative, what in tree:
        path = root / relative
        if what == "dir":
            path.mkdir()
        elif what.startswith("file "):
            path.write_text(what[5:])
        else:
            path.symlink_to(what[5:])


QUESTION_KINDS = ("stat", "lstat", "access", "listdir", "readlink", "content", "env", "names", "affinity",
                  "cpu_count", "uname")
CHANGES = ("append to a file", "touch a file", "chmod", "remove", "replace by a link", "add an entry",
           "set a variable", "unset a variable", "change a variable", "nothing")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tree=trees(), data=st.data())
def test_the_c_program_execs_exactly_when_python_s_check_holds(stage: Stage, tree: list[tuple[str, str]],
                                                                data: st.DataObject) -> None:
    root = Path(tempfile.mkdtemp(dir=stage.tmp, prefix="tree-"))  # a fresh one: a change may replace the last
    plant(root, tree)
    paths = [str(root), *(str(root / relative) for relative, _ in tree), str(root / "missing"),
             str(root / "a" / "b")]
    env = {**stage.env, "SEEN": "1", "EMPTY": ""}
    questions: list[tuple[Any, ...]] = []
    for kind in data.draw(st.lists(st.sampled_from(QUESTION_KINDS), min_size=1, max_size=8)):
        if kind == "env":
            questions.append(("env", data.draw(st.sampled_from(["SEEN", "EMPTY", "UNSET", "PYTHONPATH"]))))
        elif kind in ("names", "affinity", "cpu_count", "uname"):
            questions.append((kind,))
        elif kind == "access":
            questions.append(("access", data.draw(st.sampled_from(paths)), data.draw(st.sampled_from([0, 1, 2, 4, 7]))))
        else:
            questions.append((kind, data.draw(st.sampled_from(paths))))
    facts = recorded(questions, stage.launch_env(env))
    stage.keep(["run"], facts)
    first = stage.run(["run"], env)
    assert first["ran"] == "plan", (facts, first["stderr"])

    change = data.draw(st.sampled_from(CHANGES))
    asked_paths = sorted({question[1] for question in questions if len(question) > 1 and question[0] != "env"})
    target = Path(data.draw(st.sampled_from(asked_paths or paths)))  # a change where a fact looks, mostly
    try:
        if change == "append to a file" and target.is_file() and not target.is_symlink():
            with target.open("a") as handle:
                handle.write("more")
        elif change == "touch a file":
            os.utime(target, ns=(1, 2), follow_symlinks=False)
        elif change == "chmod" and not target.is_symlink():
            target.chmod(target.stat().st_mode & 0o7777 ^ 0o020)
        elif change == "remove":
            shutil.rmtree(target) if target.is_dir() and not target.is_symlink() else target.unlink()
        elif change == "replace by a link":
            shutil.rmtree(target) if target.is_dir() and not target.is_symlink() else target.unlink()
            target.symlink_to("/")
        elif change == "add an entry" and target.is_dir():
            (target / "new").write_text("")
        elif change == "set a variable":
            env["UNSET"] = "now"
        elif change == "unset a variable":
            env.pop("SEEN")
        elif change == "change a variable":
            env["EMPTY"] = "x"
    except OSError:
        pass
    python_says = facts_hold(facts, stage.launch_env(env))
    after = stage.run(["run"], env)
    assert after["ran"] == ("plan" if python_says else "fallback"), (change, str(target), facts, after["stderr"])


def test_pseudo_files_of_the_kernel_are_checked_by_content(stage: Stage) -> None:
    """/proc and /sys files say nothing in their stat: the fact is their content's crc32 and length."""
    path = "/proc/sys/kernel/ostype"
    assert path.startswith(PSEUDO_FILE_ROOTS)
    facts = recorded([("content", path), ("content", "/proc/no-such-file")], stage.launch_env(stage.env))
    stage.keep(["true"], facts)
    assert stage.run(["true"])["ran"] == "plan"
    stage.keep(["true"], [("content", path, (1, 2))])
    assert stage.run(["true"])["ran"] == "fallback"


# --- through a checkout's bin/envrun ----------------------------------------------------------------------------
class Checkout:
    """A checkout whose bin/envrun is this one's, whose .venv/bin/python notes every start in a log before it
    starts this checkout's Python, whose .venv/libexec/envrun-repeat is the program built above, and a stand-in
    apptainer on PATH that writes what it was started with."""

    def __init__(self, tmp: Path, program: Path) -> None:
        self.root = tmp / "checkout"
        (self.root / "bin").mkdir(parents=True)
        shutil.copy2(REPO / "bin" / "envrun", self.root / "bin" / "envrun")
        for name in ("envbuild", "recipes", "pyproject.toml"):
            (self.root / name).symlink_to(REPO / name)
        (self.root / ".venv" / "bin").mkdir(parents=True)
        (self.root / ".venv" / "libexec").mkdir()
        self.starts = tmp / "python-starts.log"
        python = self.root / ".venv" / "bin" / "python"
        python.write_text(f"#!/bin/sh\necho started >>{self.starts}\nexec {sys.executable} \"$@\"\n")
        python.chmod(0o755)
        self.repeat = self.root / ".venv" / "libexec" / "envrun-repeat"
        shutil.copy2(program, self.repeat)
        self.record = tmp / "apptainer.json"
        tools = tmp / "tools"
        tools.mkdir()
        runtime = tools / "apptainer"
        runtime.write_text(f"#!{sys.executable} -I\nimport json, os, sys\n"
                           "if sys.argv[1:] == ['--version']:\n    print('apptainer version 1.4.5')\n    sys.exit()\n"
                           # as started (/proc): not os.environ, which this Python changes under a C locale
                           "given = open('/proc/self/environ', 'rb').read().decode('utf-8', 'surrogateescape')\n"
                           "env = dict(entry.split('=', 1) for entry in given.split('\\0') if '=' in entry)\n"
                           f"json.dump({{'argv': sys.argv[1:], 'env': env}}, open({str(self.record)!r}, 'w'))\n")
        runtime.chmod(0o755)
        self.image = tmp / "images" / "a.sif"
        self.image.parent.mkdir()
        self.image.write_bytes(b"no SIF header: read as an image of no known architecture\n")
        self.cwd = tmp / "project"
        self.cwd.mkdir()
        self.env = {"PATH": f"{tools}:/usr/bin:/bin", "HOME": str(tmp / "home"), "LANG": "C.UTF-8",
                    "XDG_CACHE_HOME": str(tmp / "cache"), "XDG_CONFIG_HOME": str(tmp / "config"),
                    "ENVBUILD_SYSTEM": "local", "ENVBUILD_CACHE_DIR": str(tmp / "store")}

    def launch(self, *args: str) -> tuple[bool, dict[str, Any]]:
        """(whether Python started, what apptainer was started with)."""
        self.starts.unlink(missing_ok=True)
        self.record.unlink(missing_ok=True)
        done = subprocess.run([str(self.root / "bin" / "envrun"), "--image", str(self.image), *args],
                              capture_output=True, text=True, env=self.env, cwd=self.cwd, timeout=120)
        assert done.returncode == 0, done.stderr
        return self.starts.exists(), json.loads(self.record.read_text())


@pytest.fixture
def checkout(tmp_path: Path, repeat_program: Path) -> Checkout:
    return Checkout(tmp_path, repeat_program)


@pytest.mark.parametrize("locale", [{"LANG": "C.UTF-8"}, {}, {"LC_CTYPE": "C"}, {"LC_ALL": "C"}],
                         ids=["utf8", "no locale", "LC_CTYPE=C", "LC_ALL=C"])
def test_a_repeat_launch_through_bin_envrun_starts_no_python_and_execs_what_python_would(
        checkout: Checkout, locale: dict[str, str]) -> None:
    """Under a C locale too, where Python sets LC_CTYPE for itself (PEP 538): no launch passes that on."""
    checkout.env.pop("LANG")
    checkout.env.update(locale)
    started = [checkout.launch("python", "train.py")[0] for _ in range(2)]  # caches filled, the plan kept
    assert started == [True, True]
    first = checkout.launch("python", "train.py")
    assert {name: value for name, value in first[1]["env"].items() if name.startswith(("LC_", "LANG"))} == locale
    python_started, by_c = first
    assert not python_started, "the kept plan was not exec'd by envrun-repeat"
    checkout.repeat.chmod(0o644)  # bin/envrun now starts Python, which execs the same kept plan
    python_started, by_python = checkout.launch("python", "train.py")
    assert python_started
    assert by_c == by_python
    checkout.repeat.chmod(0o755)
    assert not checkout.launch("python", "train.py")[0]


def test_a_changed_fact_through_bin_envrun_plans_again_and_keeps_the_new_plan(checkout: Checkout) -> None:
    for _ in range(2):
        checkout.launch("true")
    assert not checkout.launch("true")[0]
    checkout.image.write_bytes(b"another image\n")  # a replaced image
    assert checkout.launch("true")[0]
    assert not checkout.launch("true")[0], "the plan made again is kept for the C program too"
    (checkout.root / "bin" / "envrun").write_text((REPO / "bin" / "envrun").read_text() + "\n# edited\n")
    assert checkout.launch("true")[0], "an edited bin/envrun (its Python program) is a miss"
    checkout.env["ENVRUN_PLAN_CACHE"] = "off"
    assert checkout.launch("true")[0]


def test_an_unprivileged_user_s_repeat_launch_through_this_checkout_starts_no_python() -> None:
    """As the unprivileged test user, with this checkout's own bin/envrun and the envrun-repeat that
    provision/python-env.sh built: the user's plan is kept in its own cache and its repeat launch execs
    no Python (strace: every program started)."""
    from tests.support.trust_accounts import ENVRUN, as_user, unprivileged

    account = unprivileged()
    if os.geteuid() != 0:
        pytest.fail("running as the unprivileged user needs root (CI runs the tests as root)", pytrace=False)
    assert os.access(REPO / ".venv/libexec/envrun-repeat", os.X_OK), "provision/python-env.sh builds it"
    work = Path(tempfile.mkdtemp(prefix="envbuild-repeat-", dir="/var/tmp"))
    try:
        work.chmod(0o755)
        tools = work / "tools"
        tools.mkdir()
        runtime = tools / "apptainer"
        runtime.write_text("#!/bin/sh\n[ \"$1\" = --version ] && echo 'apptainer version 1.4.5'\nexit 0\n")
        runtime.chmod(0o755)
        image = work / "a.sif"
        image.write_bytes(b"no SIF header\n")
        image.chmod(0o644)
        project = work / "project"
        project.mkdir()
        os.chown(project, account.pw_uid, account.pw_gid)
        started: list[list[str]] = []
        for attempt in range(4):
            trace = project / f"trace-{attempt}"
            done = as_user(account, ["strace", "-f", "-qq", "-e", "trace=execve", "-o", str(trace), ENVRUN,
                                     "--image", str(image), "true"], cwd=project,
                           env_extra={"PATH": f"{tools}:/usr/bin:/bin", "LANG": "C.UTF-8"})
            assert done.returncode == 0, done.stderr
            started.append([line.split('"')[1] for line in trace.read_text().splitlines() if "execve(" in line])
        assert any(program.endswith("/python") for program in started[0]), started[0]
        assert not any(program.endswith(("/python", "/python3")) for program in started[-1]), started[-1]
        assert started[-1][-1] == str(runtime), started[-1]
    finally:
        shutil.rmtree(work, ignore_errors=True)


@pytest.mark.parametrize(("started", "coerced", "after"), [
    (b"PATH=/bin\0HOME=/h\0", "C.UTF-8", None),
    (b"PATH=/bin\0LC_CTYPE=C\0", "C.UTF-8", "C"),
    (b"LC_CTYPE=C.UTF-8\0", "C.UTF-8", "C.UTF-8"),
    (b"PATH=/bin\0", "en_US.UTF-8", "en_US.UTF-8"),  # not a value coercion sets: the user's, left alone
])
def test_python_s_own_lc_ctype_is_put_back_to_what_the_process_was_started_with(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, started: bytes, coerced: str, after: str | None) -> None:
    environ_file = tmp_path / "environ"
    environ_file.write_bytes(started)
    monkeypatch.setenv("LC_CTYPE", coerced)
    plancache.restore_coerced_locale(str(environ_file))
    assert os.environ.get("LC_CTYPE") == after
    monkeypatch.setenv("LC_CTYPE", "C.UTF-8")
    plancache.restore_coerced_locale(str(tmp_path / "no-proc"))
    assert os.environ["LC_CTYPE"] == "C.UTF-8", "without /proc nothing is changed"
