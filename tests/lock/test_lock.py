"""Lock files: planning the uv call, parsing its output, writing and reading locks, staleness."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from packaging.version import Version
from uv import find_uv_bin

from envbuild import __version__
from envbuild.envspec.specmodel import Spec
from envbuild.lock.fileformat import read_lock, render_lock
from envbuild.lock.lockmodel import (
    Lock,
    LockedPackage,
    LockInputs,
    LockTarget,
    lock_inputs,
    lock_path_for,
    lock_sha256,
    requirements_with_hashes,
)
from envbuild.lock.staleness import stale_reasons
from envbuild.lock.uv import parse_uv_requirements, uv_compile_argv, uv_python_platform
from envbuild.shared.errors import EnvbuildError

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "uv-compile-output.txt"
TARGET = LockTarget(python="3.11.2", platform="x86_64-manylinux_2_36")
INPUTS = LockInputs(
    requirements=("torch==2.13.0", "transformers", 'numpy>=1.26,<3; python_version >= "3.10"', "accelerate[deepspeed]"),
    base="debootstrap:bookworm include=git",
    system="local",
    torch_index="https://download.pytorch.org/whl/cpu",
    interpreter="python3",
)
H = {letter: f"sha256:{letter * 64}" for letter in "abcdef"}

# This machine's package sources (the same as its pip configuration), without PyPI: the test needs no network.
LOCAL_INDEX_ARGS = [
    "--index-url", "file:///opt/pypi/simple", "--extra-index-url", "file:///opt/pypi-more/simple",
    "--find-links", "/opt/wheels", "--index-strategy", "unsafe-best-match", "--offline",
]


def make_lock(packages: tuple[LockedPackage, ...] | None = None, inputs: LockInputs = INPUTS) -> Lock:
    if packages is None:
        packages = (
            LockedPackage("torch", "2.13.0+cpu", (H["b"], H["a"])),
            LockedPackage("Typing_Extensions", "4.15.0", (H["c"],)),
            LockedPackage("idna", "3.10", (H["d"],)),  # reads as the float 3.1 unless quoted
            LockedPackage("six", "2.0", (H["e"],)),
        )
    return Lock(inputs=inputs, target=TARGET, base_digest=H["f"], recipe_digest=H["a"], resolver="uv 0.13.9",
                packages=packages, spec_name="local-cpu-pytorch")


# --- writing and reading --------------------------------------------------------------------------


def test_render_then_read_gives_the_same_lock() -> None:
    lock = make_lock()
    text = render_lock(lock, spec_path_for_comment="envs/local-cpu-pytorch.yaml")
    assert read_lock(text, "envs/local-cpu-pytorch.lock") == lock


def test_render_of_uv_output_round_trips() -> None:
    lock = make_lock(parse_uv_requirements(FIXTURE.read_text()))
    assert read_lock(render_lock(lock, spec_path_for_comment="x.yaml"), "x.lock") == lock


def test_render_is_deterministic_and_independent_of_input_order() -> None:
    lock = make_lock()
    shuffled = make_lock(tuple(replace(p, hashes=tuple(reversed(p.hashes))) for p in reversed(lock.packages)))
    first = render_lock(lock, spec_path_for_comment="envs/a.yaml")
    assert render_lock(lock, spec_path_for_comment="envs/a.yaml") == first
    assert render_lock(shuffled, spec_path_for_comment="envs/a.yaml") == first


def test_rendered_layout() -> None:
    text = render_lock(make_lock(), spec_path_for_comment="envs/my env.yaml")
    header = [line for line in text.splitlines() if line.startswith("#")]
    assert any("envbuild lock 'envs/my env.yaml'" in line for line in header)
    assert any("envbuild lock --upgrade 'envs/my env.yaml'" in line for line in header)
    assert any("envbuild lock --upgrade-package NAME 'envs/my env.yaml'" in line for line in header)
    assert any("envbuild build 'envs/my env.yaml' --locked" in line for line in header)
    body = text.split("\n", len(header))[-1]
    assert body.startswith("lock-format: 1\nspec: local-cpu-pytorch\ninputs:\n  requirements:\n  - torch==2.13.0\n")
    assert "  torch-index: https://download.pytorch.org/whl/cpu\n" in body
    assert "target:\n  python: 3.11.2\n  platform: x86_64-manylinux_2_36\n" in body
    assert "resolver: uv 0.13.9\npackages:\n  idna:\n    version: '3.10'\n    hashes:\n    - sha256:ddd" in body
    assert "  typing-extensions:\n" in body  # names are written normalised
    assert list(yaml.safe_load(body)["packages"]) == ["idna", "six", "torch", "typing-extensions"]


def test_torch_index_none_is_written_as_null() -> None:
    lock = make_lock(inputs=replace(INPUTS, torch_index=None))
    text = render_lock(lock, spec_path_for_comment="a.yaml")
    assert "  torch-index: null\n" in text
    assert read_lock(text, "a.lock").inputs.torch_index is None


def test_lock_normalises_packages_and_refuses_duplicates() -> None:
    lock = make_lock()
    assert [p.name for p in lock.packages] == ["idna", "six", "torch", "typing-extensions"]
    assert lock.packages[2].hashes == (H["a"], H["b"])
    with pytest.raises(ValueError, match="typing-extensions"):
        make_lock((LockedPackage("typing_extensions", "1", (H["a"],)), LockedPackage("Typing.Extensions", "2", (H["b"],))))


def read_error(text: str, source: str = "envs/demo.lock") -> EnvbuildError:
    with pytest.raises(EnvbuildError) as caught:
        read_lock(text, source)
    return caught.value


def good_document() -> dict:
    return yaml.safe_load(render_lock(make_lock(), spec_path_for_comment="envs/demo.yaml"))


def test_newer_lock_format_asks_for_a_newer_envbuild() -> None:
    document = good_document()
    document["lock-format"] = 2
    document["something-new"] = True  # a newer format's keys are not reported as unknown
    error = read_error(yaml.safe_dump(document))
    assert error.message.startswith("envs/demo.lock: lock-format 2 was written by a newer envbuild")
    assert f"envbuild {__version__} reads lock-format 1" in error.message
    assert error.hint is not None and "upgrade envbuild" in error.hint


def test_missing_key_is_named_with_the_file() -> None:
    document = good_document()
    del document["resolver"]
    del document["inputs"]["torch-index"]
    error = read_error(yaml.safe_dump(document))
    assert "envs/demo.lock: resolver: missing" in error.message.splitlines()
    assert "envs/demo.lock: inputs.torch-index: missing" in error.message.splitlines()
    assert error.hint is not None and "envbuild lock" in error.hint


def test_wrong_types_and_values_are_named() -> None:
    text = render_lock(make_lock(), spec_path_for_comment="a.yaml")
    error = read_error(text.replace("version: '3.10'", "version: 3.10"))
    assert error.message == "envs/demo.lock: packages.idna.version: Input should be a valid string (got 3.1)"
    document = good_document()
    document["lock-format"] = "1"
    document["packages"]["six"]["hashes"] = ["md5:abc"]
    document["packages"]["Six_Extra"] = {"version": "1.0", "hashes": [H["a"]]}
    document["base-digest"] = "abc"
    document["target"]["pythn"] = "3.11"
    lines = read_error(yaml.safe_dump(document)).message.splitlines()
    assert all(line.startswith("envs/demo.lock: ") for line in lines)
    assert any(line.startswith("envs/demo.lock: lock-format: Input should be a valid integer") for line in lines)
    assert any(line.startswith("envs/demo.lock: packages.six.hashes.0: String should match pattern") for line in lines)
    assert any("'Six_Extra' is not a normalised package name" in line for line in lines)
    assert any(line.startswith("envs/demo.lock: base-digest:") for line in lines)
    assert "envs/demo.lock: target.pythn: unknown key" in lines


def test_not_a_lock_file() -> None:
    assert read_error("a: [b").message.startswith("envs/demo.lock: not valid YAML")
    assert "not an envbuild lock file" in read_error("- just\n- a list\n").message
    assert "not an envbuild lock file" in read_error("").message


# --- uv's output ----------------------------------------------------------------------------------


def test_parse_real_uv_output() -> None:
    packages = parse_uv_requirements(FIXTURE.read_text())
    assert [(p.name, p.version) for p in packages] == [
        ("certifi", "2026.10.18"), ("charset-normalizer", "3.5.2"), ("idna", "3.20"), ("markdown-it-py", "4.3.0"),
        ("mdurl", "0.1.2"), ("pygments", "2.21.0"), ("requests", "2.34.2"), ("rich", "13.7.1"), ("urllib3", "2.8.0"),
    ]
    rich = packages[-2]
    assert rich.hashes == (
        "sha256:4edbae314f59eb482f54e9e30bf00d33350aaa94f4bfcd4e9e3110e64d0d7222",
        "sha256:9be308cb1fe2f1f57d67ce99e95af38a1e2bc71ad9813b0e247cf7ffbcc3a432",
    )


def test_parse_accepts_one_line_form_local_versions_and_odd_names() -> None:
    text = f"# comment\n\nTorch==2.13.0+cpu --hash={H['a']}  # inline comment\nZope.Interface==7.0 \\\n    --hash {H['b']}\n"
    assert parse_uv_requirements(text) == (
        LockedPackage("torch", "2.13.0+cpu", (H["a"],)), LockedPackage("zope-interface", "7.0", (H["b"],)),
    )
    assert parse_uv_requirements("") == ()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (f"foo @ https://example.org/foo-1.0-py3-none-any.whl \\\n    --hash={H['a']}\n",
         "line 1: foo is a URL requirement (https://example.org/foo-1.0-py3-none-any.whl)"),
        (f"idna==3.10 \\\n    --hash={H['a']}\nrich==13.7.1\n    # via -r in.txt\n", "line 3: rich==13.7.1 has no hash"),
        ("-e ./src/mypkg\n", "line 1: ./src/mypkg is an editable requirement"),
        (f"rich>=13 --hash={H['a']}\n", "line 1: rich is not pinned to one version (rich>=13)"),
        (f"rich==13.* --hash={H['a']}\n", "line 1: rich is not pinned to one version"),
        (f'rich==13.7.1 ; python_version >= "3.8" --hash={H["a"]}\n', "line 1: rich carries extras or environment markers"),
        (f"rich==13.7.1 --hash={H['a']}\nRich==13.7.1 --hash={H['a']}\n", "line 2: rich is listed twice"),
        ("rich==13.7.1 --hash=sha256:abc\n", "line 1: 'sha256:abc' is not a sha256, sha384 or sha512 hash"),
        (f"--index-url https://pypi.org/simple\nrich==13.7.1 --hash={H['a']}\n", "line 1: unexpected option --index-url"),
        (f"rich==13.7.1 --hash={H['a']} --no-binary rich\n", "line 1: unexpected option --no-binary"),
    ],
)
def test_parse_refuses_anything_but_hashed_pins(text: str, expected: str) -> None:
    with pytest.raises(EnvbuildError) as caught:
        parse_uv_requirements(text)
    assert caught.value.message.startswith("uv pip compile output, ")
    assert expected in caught.value.message


# --- staleness ------------------------------------------------------------------------------------


def test_fresh_lock_has_no_reasons_even_when_reordered_or_respelled() -> None:
    lock = make_lock()
    assert stale_reasons(lock, INPUTS) == []
    respelled = replace(INPUTS, requirements=('NumPy <3 , >= 1.26 ; python_version>="3.10"', "Accelerate[DeepSpeed]",
                                              "transformers", "torch == 2.13.0"))
    assert stale_reasons(lock, respelled) == []


def test_requirement_changes_are_matched_by_project_name() -> None:
    current = replace(INPUTS, requirements=("torch==2.13.0", "Transformers==4.57.1", 'numpy>=1.26,<3; python_version >= "3.10"',
                                            "rich"))
    assert stale_reasons(make_lock(), current) == [
        "requirement changed: transformers -> Transformers==4.57.1",
        "requirement added: rich",
        "requirement removed: accelerate[deepspeed]",
    ]


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"base": "debootstrap:trixie"}, "base changed: debootstrap:bookworm include=git -> debootstrap:trixie"),
        ({"system": "lumi-g"}, "system changed: local -> lumi-g"),
        ({"torch_index": None}, "torch index changed: https://download.pytorch.org/whl/cpu -> none (host configuration only)"),
        ({"interpreter": "/usr/bin/python3.11"}, "interpreter changed: python3 -> /usr/bin/python3.11"),
    ],
)
def test_other_input_changes(change: dict, expected: str) -> None:
    assert stale_reasons(make_lock(), replace(INPUTS, **change)) == [expected]


def test_lock_inputs_from_a_spec() -> None:
    spec = Spec.model_validate({
        "name": "demo", "system": "lumi-g",
        "base": {"debootstrap": "bookworm", "include": ["vim", "git", "vim"], "mirror": "http://deb.example/debian"},
        "python": {"interpreter": "python3.11", "pytorch": {"version": "2.13.0", "variant": "rocm6.4"},
                   "transformers": "4.57.1", "packages": ["rich"]},
    })
    assert lock_inputs(spec, "https://example/rocm6.4") == LockInputs(
        requirements=("torch==2.13.0", "transformers==4.57.1", "rich"),
        base="debootstrap:bookworm include=git,vim mirror=http://deb.example/debian",
        system="lumi-g", torch_index="https://example/rocm6.4", interpreter="python3.11",
    )
    docker = Spec.model_validate({"name": "d", "base": "docker://python:3.12-slim"})
    assert lock_inputs(docker, None) == LockInputs((), "docker://python:3.12-slim", "local", None, "python3")


# --- small helpers --------------------------------------------------------------------------------


def test_requirements_with_hashes() -> None:
    assert requirements_with_hashes(make_lock()) == (
        f"idna==3.10 --hash={H['d']}\n"
        f"six==2.0 --hash={H['e']}\n"
        f"torch==2.13.0+cpu --hash={H['a']} --hash={H['b']}\n"
        f"typing-extensions==4.15.0 --hash={H['c']}\n"
    )


def test_uv_compile_argv() -> None:
    index_args = ["--extra-index-url", "file:///opt/pypi/simple", "--index-strategy", "unsafe-best-match"]
    argv = uv_compile_argv("/usr/bin/uv", "/w/in.txt", "/w/out.txt", TARGET, index_args=index_args, cache_dir="/c/uv")
    assert argv == [
        "/usr/bin/uv", "pip", "compile", "/w/in.txt", "--format", "requirements.txt", "--output-file", "/w/out.txt",
        "--python-version", "3.11.2", "--python-platform", "x86_64-manylinux_2_36", "--generate-hashes",
        "--no-header", "--no-annotate", "--no-config", "--no-python-downloads", "--quiet",
        *index_args, "--cache-dir", "/c/uv",
    ]
    upgrade_all = uv_compile_argv("uv", "in", "out", TARGET, index_args=[], cache_dir="c", upgrade=True)
    assert upgrade_all[-1] == "--upgrade"
    some = uv_compile_argv("uv", "in", "out", TARGET, index_args=[], cache_dir="c", upgrade_packages=("torch", "rich"))
    assert some[-2:] == ["--upgrade-package=torch", "--upgrade-package=rich"] and "--upgrade" not in some


@pytest.mark.parametrize(
    ("machine", "glibc", "platform"),
    [("x86_64", "2.36", "x86_64-manylinux_2_36"), ("aarch64", "2.41", "aarch64-manylinux_2_40"),
     ("arm64", "2.30", "aarch64-manylinux_2_28"), ("amd64", "2.17", "x86_64-manylinux_2_17")],
)
def test_uv_python_platform(machine: str, glibc: str, platform: str) -> None:
    assert uv_python_platform(machine, glibc) == platform


def test_uv_python_platform_refusals() -> None:
    for machine, glibc in (("ppc64le", "2.36"), ("x86_64", "2.12"), ("x86_64", "musl")):
        with pytest.raises(EnvbuildError):
            uv_python_platform(machine, glibc)


def test_lock_path_and_hash() -> None:
    assert lock_path_for(Path("envs/foo.yaml")) == Path("envs/foo.lock")
    assert lock_path_for(Path("/a/b.c.yml")) == Path("/a/b.c.lock")
    assert lock_path_for(Path("envs/foo.lock")) == Path("envs/foo.lock.lock")  # never the spec itself
    assert lock_sha256("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"


# --- with the real uv -----------------------------------------------------------------------------


@pytest.fixture
def local_index() -> None:
    if not Path("/opt/pypi/simple/requests").is_dir():
        message = "the local package index /opt/pypi is not set up (run provision/install.sh)"
        if os.environ.get("ENVBUILD_ALLOW_SKIP") == "1":
            pytest.skip(message)
        pytest.fail(message, pytrace=False)


def compile_lock(workdir: Path, requirements: str, cache: Path, *, upgrade: bool = False,
                 upgrade_packages: tuple[str, ...] = ()) -> Lock:
    inputs_file, output_file = workdir / "requirements.in", workdir / "resolved.txt"
    inputs_file.write_text(requirements)
    argv = uv_compile_argv(find_uv_bin(), str(inputs_file), str(output_file), TARGET, index_args=LOCAL_INDEX_ARGS,
                           cache_dir=str(cache / "uv"), upgrade=upgrade, upgrade_packages=upgrade_packages)
    result = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""  # --quiet: the resolution goes to the output file only
    inputs = replace(INPUTS, requirements=tuple(requirements.split()), torch_index=None)
    return make_lock(parse_uv_requirements(output_file.read_text()), inputs=inputs)


def test_real_uv_resolution_round_trips_and_installs(tmp_path: Path, build_cache: Path, local_index: None) -> None:
    lock = compile_lock(tmp_path, "requests\nrich==13.9.4\n", build_cache)
    names = {p.name for p in lock.packages}
    assert {"requests", "rich", "urllib3", "idna", "certifi", "charset-normalizer", "markdown-it-py", "pygments"} <= names
    assert next(p.version for p in lock.packages if p.name == "rich") == "13.9.4"
    assert all(p.hashes for p in lock.packages)
    text = render_lock(lock, spec_path_for_comment="envs/demo.yaml")
    assert read_lock(text, "envs/demo.lock") == lock

    # What the build feeds uv pip install is accepted as it is, hashes and all.
    pins = tmp_path / "locked.txt"
    pins.write_text(requirements_with_hashes(lock))
    venv = tmp_path / "venv"
    subprocess.run([find_uv_bin(), "venv", "--quiet", "--no-config", "--python", sys.executable, str(venv)], check=True)
    install = subprocess.run(
        [find_uv_bin(), "pip", "install", "--dry-run", "--no-config", "--require-hashes", "--no-deps", "--python", str(venv / "bin/python"),
         "--cache-dir", str(build_cache / "uv"), *LOCAL_INDEX_ARGS, "-r", str(pins)],
        capture_output=True, text=True, timeout=300,
    )
    assert install.returncode == 0, install.stderr
    assert "rich==13.9.4" in install.stderr


def test_real_uv_relock_keeps_versions_unless_upgraded(tmp_path: Path, build_cache: Path, local_index: None) -> None:
    first = compile_lock(tmp_path, "requests\nrich==13.9.4\n", build_cache)

    def relock(*, upgrade: bool = False, upgrade_packages: tuple[str, ...] = ()) -> str:
        # As the CLI does: the previous lock, as requirements, is uv's output file and so its preferences.
        (tmp_path / "resolved.txt").write_text(requirements_with_hashes(first))
        lock = compile_lock(tmp_path, "requests\nrich\n", build_cache, upgrade=upgrade, upgrade_packages=upgrade_packages)
        return next(p.version for p in lock.packages if p.name == "rich")

    assert relock() == "13.9.4"
    assert Version(relock(upgrade_packages=("rich",))) > Version("13.9.4")
    assert Version(relock(upgrade=True)) > Version("13.9.4")
