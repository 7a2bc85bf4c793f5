"""Whether an image's environment scripts can set $WITH_CONDA (envbuild.launch.imageenv), and the plan without the
container shim where nothing can.

The scripts here are written in the shapes images carry (apptainer's own 01-base.sh/95-apps.sh/99-base.sh, a
%environment block, a Docker image's ENV as 10-docker2singularity.sh, LUMI's `export WITH_CONDA=...`), not copied.
A grammar of shell statements (hypothesis) checks the verdict against bash and dash themselves: whenever sourcing a
generated script leaves WITH_CONDA set, the verdict must not be "" (the shim is only left out when it is sure)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envbuild.host.buildhost import Runtime
from envbuild.launch.imageenv import classify_environment, image_with_conda, script_may_set
from envbuild.launch.launchplan import WITH_CONDA_SOURCES, LaunchRequest, plan_launch
from envbuild.recipes.loadrecipe import load_recipe

APPS_SCIF = """\
#!/bin/sh
if test -n "${SINGULARITY_APPNAME:-}"; then
    export SINGULARITY_APPNAME
    if test -d "/scif/apps/${SINGULARITY_APPNAME:-}/"; then
        PATH="/scif/apps/${SINGULARITY_APPNAME:-}:$PATH"
        if [ -f "/scif/apps/${SINGULARITY_APPNAME:-}/scif/env/90-environment.sh" ]; then
            . "/scif/apps/${SINGULARITY_APPNAME:-}/scif/env/90-environment.sh"
        fi
        export PATH
    else
        echo "no such app: ${SINGULARITY_APPNAME}"
        exit 1
    fi
fi
"""
BASE = """\
#!/bin/sh
# library path of the runtime's own libraries
if [ -z "${LD_LIBRARY_PATH:-}" ]; then
    LD_LIBRARY_PATH="/.singularity.d/libs"
else
    LD_LIBRARY_PATH="$LD_LIBRARY_PATH:/.singularity.d/libs"
fi
export LD_LIBRARY_PATH PS1
"""
DOCKER_ENV = """\
#!/bin/sh
export PATH="${PATH:-/usr/local/bin:/usr/bin:/bin}"
export NVIDIA_VISIBLE_DEVICES="${NVIDIA_VISIBLE_DEVICES:-all}"
export PYTORCH_VERSION="${PYTORCH_VERSION:-2.4.0}"
"""
ENVIRONMENT = """\
#!/bin/sh
# Custom environment shell code should follow

    export LC_ALL=C.UTF-8 HF_HOME="/scratch/hf cache"
    VIRTUAL_ENV=/opt/venv; export VIRTUAL_ENV
    case ":$PATH:" in *":/opt/venv/bin:"*) ;; *) PATH="/opt/venv/bin:$PATH" ;; esac
"""
LUMI_ENVIRONMENT = 'export WITH_CONDA="source /opt/miniconda3/bin/activate pytorch"\n'


def verdict(scripts: dict[str, str | None], has_scif: bool = False) -> str:
    return classify_environment(sorted(scripts), scripts.get, has_scif=has_scif)


def test_the_scripts_images_carry_set_nothing_unseen() -> None:
    assert verdict({"01-base.sh": "#!/bin/sh\n", "10-docker2singularity.sh": DOCKER_ENV, "90-environment.sh": ENVIRONMENT,
                    "94-appsbase.sh": "", "95-apps.sh": APPS_SCIF, "99-base.sh": BASE}) == ""


def test_lumis_environment_keeps_the_activation() -> None:
    assert verdict({"90-environment.sh": LUMI_ENVIRONMENT, "99-base.sh": BASE}) == \
        "the image's /.singularity.d/env/90-environment.sh mentions WITH_CONDA"


@pytest.mark.parametrize(("text", "why"), [
    (". /opt/conda/etc/profile.d/env.sh\n", "runs `.` (line 1)"),
    ("if true; then\n  source /etc/site-env\nfi\n", "runs `source` (line 2)"),
    ('eval "$(cat /etc/env)"\n', "runs `eval` (line 1)"),
    ("export $(grep -v '^#' /etc/env | xargs)\n", "runs `export` with a name it computes (line 1)"),
    ('name=WITH; export "${name}_CONDA=x"\n', "runs `export` with a name it computes (line 1)"),
    ("read -r A B < /etc/env\n", "runs `read` (line 1)"),
    ("printf -v VAR %s x\n", "runs `printf` (line 1)"),
    ("setup() { eval \"$1\"; }\n", "runs `eval` (line 1)"),
    ('$SETUP_COMMAND --quiet\n', "runs a command whose name is computed (line 1)"),
    ("builtin source /etc/env\n", "runs `builtin` (line 1)"),
    ("\\export $(cat /etc/env)\n", "runs `export` (line 1)"),
    ("e\\val \"$SETUP\"\n", "runs `eval` (line 1)"),
    ("x#y; eval foo\n", "is not bash that envrun can read"),
    ('x="unclosed\n', "is not bash that envrun can read"),
])
def test_what_a_reading_cannot_follow_keeps_the_activation(text: str, why: str) -> None:
    assert why in script_may_set(text, has_scif=False)


def test_the_scif_block_counts_only_where_the_image_has_scif() -> None:
    assert script_may_set(APPS_SCIF, has_scif=False) == ""
    assert "runs `.` (line 7)" in script_may_set(APPS_SCIF, has_scif=True)


def test_an_unreadable_or_overlong_script_keeps_the_activation_and_other_files_are_not_read() -> None:
    assert verdict({"50-site.sh": None}) == "the image's /.singularity.d/env/50-site.sh could not be read whole"
    assert verdict({"README": ". /etc/anything", "50-site.txt": "eval x"}) == ""  # the runtime sources *.sh only


def test_names_from_the_image_are_printed_escaped() -> None:
    assert "\x1b" not in verdict({"50-\x1b[31mred.sh": "eval x"})


def sandbox(root: Path, scripts: dict[str, str]) -> Path:
    env = root / ".singularity.d" / "env"
    env.mkdir(parents=True)
    for name, text in scripts.items():
        (env / name).write_text(text)
    return root


def test_a_sandbox_directory_is_read_directly(tmp_path: Path) -> None:
    assert image_with_conda(str(sandbox(tmp_path / "plain", {"90-environment.sh": ENVIRONMENT, "99-base.sh": BASE}))) == ""
    lumi = sandbox(tmp_path / "lumi", {"90-environment.sh": LUMI_ENVIRONMENT})
    assert "mentions WITH_CONDA" in image_with_conda(str(lumi))
    scif = sandbox(tmp_path / "scif", {"95-apps.sh": APPS_SCIF})
    assert image_with_conda(str(scif)) == ""
    (scif / "scif").mkdir()
    assert "runs `.`" in image_with_conda(str(scif))
    (tmp_path / "nothing").mkdir()
    assert image_with_conda(str(tmp_path / "nothing")) == ""  # no env scripts: nothing sets it


@pytest.mark.parametrize("where", ["script", "env directory", ".singularity.d"])
def test_a_link_in_a_sandbox_is_not_followed_on_the_host(tmp_path: Path, where: str) -> None:
    """Inside the container a link leads to the container's path; here, to the host's (a harmless file that
    mentions nothing): the verdict must not be "" from what the host holds."""
    host_file = tmp_path / "host-profile.sh"
    host_file.write_text("export PATH=/usr/bin\n")
    root = tmp_path / "sandbox"
    if where == "script":
        env = sandbox(root, {}) / ".singularity.d" / "env"
        (env / "90-environment.sh").symlink_to(host_file)
    else:
        elsewhere = sandbox(tmp_path / "elsewhere", {"90-environment.sh": "export PATH=/usr/bin\n"})
        if where == "env directory":
            (root / ".singularity.d").mkdir(parents=True)
            (root / ".singularity.d" / "env").symlink_to(elsewhere / ".singularity.d" / "env")
        else:
            root.mkdir()
            (root / ".singularity.d").symlink_to(elsewhere / ".singularity.d")
    verdict_here = image_with_conda(str(root))
    assert verdict_here != "" and ("link" in verdict_here or "could not be read" in verdict_here), verdict_here


def test_a_file_that_is_no_image_keeps_the_activation(tmp_path: Path) -> None:
    bogus = tmp_path / "bogus.sif"
    bogus.write_bytes(b"not a SIF at all")
    assert "could not be read" in image_with_conda(str(bogus))
    assert "could not be read" in image_with_conda(str(tmp_path / "missing.sif"))


# --- the plan -------------------------------------------------------------------------------------------------------

def planned(image_with_conda: str | None, environ: dict[str, str] | None = None, **request: object) -> tuple[str, ...]:
    plan = plan_launch(LaunchRequest(command=("python", "train.py"), image="/img/env.sif", recipe=load_recipe("local"),
                                     runtime=Runtime("/usr/bin/apptainer", "apptainer"), cwd="/w", environ=environ or {},
                                     image_with_conda=image_with_conda, **request))  # type: ignore[arg-type]
    start = plan.argv.index("/img/env.sif") + 1
    assert plan.reasons  # the note on the shim is among them
    return plan.argv[start:]


def test_without_anything_to_activate_the_container_starts_the_program_itself() -> None:
    assert planned("") == ("python", "train.py")


@pytest.mark.parametrize("name", WITH_CONDA_SOURCES)
def test_a_host_variable_that_can_reach_the_container_keeps_the_shim(name: str) -> None:
    assert planned("", {name: "source /opt/conda/bin/activate x"})[:2] == ("/bin/sh", "-c")


@pytest.mark.parametrize("request_fields", [
    {"env": (("WITH_CONDA", "source /x/activate"),)},  # the envrun config's env:
    {"overlays": (("/p/extras.sqsh", "/user-software"),)},
    {"runscript": "its runscript sets FI_HMEM_DISABLE_P2P, then runs the command it is given"},
])
def test_what_else_the_shim_does_keeps_it(request_fields: dict[str, object]) -> None:
    assert planned("", **request_fields)[:2] == ("/bin/sh", "-c")


def test_an_image_that_may_set_it_or_was_not_read_keeps_the_shim_and_says_why() -> None:
    assert planned(None)[:2] == ("/bin/sh", "-c")
    plan = plan_launch(LaunchRequest(command=("true",), image="/img/env.sif", recipe=load_recipe("local"),
                                     runtime=Runtime("/usr/bin/apptainer", "apptainer"), cwd="/w",
                                     image_with_conda="the image's /.singularity.d/env/90-environment.sh mentions WITH_CONDA"))
    assert any("it may be set: the image's /.singularity.d/env/90-environment.sh mentions WITH_CONDA" in reason
               for reason in plan.reasons)


# --- the verdict against the shells themselves ----------------------------------------------------------------------

NAMES = ("A", "PATH", "B_1", "WITH", "CONDA")
VALUES = ("x", "/opt/venv/bin", "two words", "$PATH", "")
# Statements in the shapes of environment scripts; some set WITH_CONDA in ways a text search for the name misses.
STATEMENTS = st.one_of(
    st.builds(lambda n, v: f'{n}="{v}"', st.sampled_from(NAMES), st.sampled_from(VALUES)),
    st.builds(lambda n, v: f'export {n}="{v}"', st.sampled_from(NAMES), st.sampled_from(VALUES)),
    st.builds(lambda n: f"export {n}", st.sampled_from(NAMES)),
    st.just('n=WITH_; eval "${n}CONDA=1"'),
    st.just('n=WITH_; export "${n}CONDA=1"'),
    st.just('printf -v "WITH""_CONDA" %s 1'),
    st.just("read -r WITH\\_CONDA <<'EOF'\nx\nEOF"),
    st.just('set -- W I T H; declare "$1$2$3$4"_CONDA=1'),
    st.just(". ./sets-it.sh"),
    st.just("\\. ./sets-it.sh"),
    st.just("n=WITH_; \\export \"${n}CONDA=1\""),
    st.just("f() { eval \"W\"\"ITH_CONDA=1\"; }; f"),
    st.just('if [ -n "${A:-}" ]; then PATH="/a:$PATH"; fi'),
    st.just('case ":$PATH:" in *":/opt/bin:"*) ;; *) PATH="/opt/bin:$PATH" ;; esac'),
    st.just("# a comment with WITH_CONDA in it"),
)


@pytest.fixture(scope="module")
def shells(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], Path]:
    here = tmp_path_factory.mktemp("sourced")
    (here / "sets-it.sh").write_text("W=WITH_CONDA\neval \"$W=1\"\n")
    return [shell for shell in ("bash", "dash") if shutil.which(shell)], here


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(STATEMENTS, min_size=1, max_size=6))
def test_a_script_that_sets_it_in_a_shell_is_never_judged_clean(shells: tuple[list[str], Path],
                                                               statements: list[str]) -> None:
    available, here = shells
    text = "\n".join(statements) + "\n"
    judged = script_may_set(text, has_scif=False)
    (here / "env.sh").write_text(text)
    for shell in available:
        result = subprocess.run([shell, "-c", '. ./env.sh >/dev/null 2>&1; echo "${WITH_CONDA+set}"'], cwd=here,
                                capture_output=True, text=True, timeout=30, env={"PATH": os.environ["PATH"]})
        if result.stdout.strip() == "set":
            assert judged, f"{shell} sets WITH_CONDA from this script, judged clean:\n{text}"
