"""Spec validation: good specs load; bad ones give located, exact, fixable messages (exit code 2)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from envbuild.cli.envbuild_main import main
from envbuild.envspec.loadspec import load_spec, load_spec_text
from envbuild.shared.errors import SpecError

MINIMAL = "name: demo\nbase: debootstrap:bookworm\n"


def problems_of(text: str) -> list[str]:
    with pytest.raises(SpecError) as info:
        load_spec_text(textwrap.dedent(text), "spec.yaml")
    return [p.render() for p in info.value.problems]


# Shipped specs whose base is a site's image file (LUMI's /appl/local/...): on any other machine the
# host check must refuse them with the plain "does not exist" problem, and nothing else.
SITE_IMAGE_SPECS = ("lumi-overlay",)


@pytest.mark.parametrize("path", sorted(Path(__file__).resolve().parents[2].glob("envs/*.yaml")))
def test_shipped_specs_are_valid(path: Path) -> None:
    if path.stem in SITE_IMAGE_SPECS:
        loaded = load_spec(path, check_host=False)
        if not Path(loaded.spec.base.ref).exists():
            with pytest.raises(SpecError) as info:
                load_spec(path)
            [problem] = info.value.problems
            assert problem.field == "base"
            assert problem.message == f"local image {loaded.spec.base.ref!r} does not exist (resolved to {loaded.spec.base.ref})"
    else:
        loaded = load_spec(path)
    assert loaded.spec.name == path.stem


def test_site_image_specs_name_an_absolute_site_path() -> None:
    envs = Path(__file__).resolve().parents[2] / "envs"
    for name in SITE_IMAGE_SPECS:
        ref = load_spec(envs / f"{name}.yaml", check_host=False).spec.base.ref
        assert ref.startswith("/appl/") and ref.endswith(".sif"), ref


def test_minimal_spec_defaults() -> None:
    spec = load_spec_text(MINIMAL).spec
    assert spec.system == "local"
    assert spec.base.kind == "debootstrap" and spec.base.ref == "bookworm"
    assert spec.python.requirements() == []


@pytest.mark.parametrize(
    ("written", "kind", "ref"),
    [
        ("debootstrap:bookworm", "debootstrap", "bookworm"),
        ("docker://rocm/pytorch:latest", "docker", "docker://rocm/pytorch:latest"),
        ("oras://ghcr.io/x/y:1", "oras", "oras://ghcr.io/x/y:1"),
        ("localimage:/appl/img.sif", "localimage", "/appl/img.sif"),
        ("./images/base.sif", "localimage", "./images/base.sif"),
        ("{debootstrap: trixie, include: [git]}", "debootstrap", "trixie"),
        ("{docker: ubuntu:24.04}", "docker", "docker://ubuntu:24.04"),
    ],
)
def test_base_forms(written: str, kind: str, ref: str) -> None:
    spec = load_spec_text(f"name: demo\nbase: {written}\n").spec
    assert (spec.base.kind, spec.base.ref) == (kind, ref)


def test_shorthands_become_requirements() -> None:
    spec = load_spec_text(
        MINIMAL + "python:\n  pytorch: {version: '2.13.0', variant: cpu, extras: [torchvision]}\n"
        "  transformers: 4.57\n  lightning: '>=2.5'\n  packages: [numpy<3]\n"
    ).spec
    # torchvision without a version gets the one released with torch 2.13.0 (envbuild.envspec.torchfamily).
    assert spec.python.requirements() == ["torch==2.13.0", "torchvision==0.28.0", "transformers==4.57", "lightning>=2.5", "numpy<3"]
    assert spec.python.pytorch is not None and spec.python.pytorch.wheel_tag == "cpu"


@pytest.mark.parametrize(("variant", "tag"), [("cuda126", "cu126"), ("rocm6.4", "rocm6.4"), ("cpu", "cpu")])
def test_variant_wheel_tags(variant: str, tag: str) -> None:
    spec = load_spec_text(MINIMAL + f"python:\n  pytorch: {{version: '2.7.1', variant: {variant}}}\n").spec
    assert spec.python.pytorch.wheel_tag == tag


def test_many_problems_reported_at_once_with_lines_and_fixes() -> None:
    assert problems_of(
        """\
        name: "bad name"
        base: ubuntu
        python:
          pytorch:
            version: 2.x
            variant: cuda
          pakages:
            - "numpy>>2"
        env:
          1BAD: x
          FLAG: yes
        files:
          - src: a.txt
            dest: relative/path
        """
    ) == [
        "spec.yaml:1:1: name: 'bad name' does not match the pattern ^[A-Za-z0-9][A-Za-z0-9._-]*$\n"
        "    fix: use letters, digits, '.', '_' and '-', starting with a letter or digit (e.g. my-env)",
        "spec.yaml:2:1: base: cannot tell what kind of base 'ubuntu' is; write debootstrap:<suite>, docker://<image>, "
        "oras://<image>, or localimage:<path to .sif or sandbox dir>\n"
        "    fix: e.g. `base: debootstrap:bookworm`, `base: docker://rocm/pytorch:latest`, `base: localimage:/path/img.sif`",
        "spec.yaml:5:5: python.pytorch.version: '2.x' is not a version number (write e.g. 2.13.0)\n"
        "    fix: quote the version so YAML keeps it text, e.g. version: '2.13.0'",
        "spec.yaml:6:5: python.pytorch.variant: 'cuda' is not a PyTorch variant; use cpu, cuda<major><minor> (e.g. cuda126) "
        "or rocm<major>.<minor> (e.g. rocm6.4)",
        "spec.yaml:7:3: python.pakages: unknown field 'pakages'\n"
        "    fix: did you mean 'packages'? allowed here: target, interpreter, installer, pytorch, transformers, lightning, "
        "packages, lock_target",
        "spec.yaml:10:3: env.1BAD: '1BAD' is not a valid environment variable name (letters, digits and _, not starting with a digit)\n"
        "    fix: write the name with letters, digits and _, not starting with a digit (e.g. HF_HOME)",
        "spec.yaml:11:3: env.FLAG: a YAML true/false/yes/no is ambiguous here; quote it ('true', '1', 'yes')",
        "spec.yaml:14:5: files[0].dest: 'relative/path' must be an absolute path inside the image (start with /)\n"
        "    fix: write the absolute path the file gets inside the image, without '..', e.g. /opt/data/file.txt",
    ]


def test_missing_required_field_points_at_parent() -> None:
    assert problems_of("name: demo\npython:\n  pytorch:\n    variant: cpu\n") == [
        "spec.yaml:1:1: base: required field is missing\n"
        "    fix: e.g. `base: debootstrap:bookworm`, `base: docker://rocm/pytorch:latest`, `base: localimage:/path/img.sif`",
        "spec.yaml:3:3: python.pytorch.version: required field is missing\n"
        "    fix: quote the version so YAML keeps it text, e.g. version: '2.13.0'",
    ]


def test_bad_requirement_points_at_list_item() -> None:
    assert problems_of(MINIMAL + "python:\n  packages:\n    - torch\n    - 'numpy>>2'\n") == [
        "spec.yaml:6:7: python.packages[1]: 'numpy>>2' is not a pip requirement: "
        "Expected semicolon (after name with no version specifier) or end",
    ]


def test_wrong_types_are_named() -> None:
    assert problems_of(MINIMAL + "post: echo hi\ntests:\n  - {a: 1}\n") == [
        "spec.yaml:3:1: post: expected a list (lines starting with '- '), got str 'echo hi'",
        "spec.yaml:5:5: tests[0]: expected a string, got a mapping",
    ]


def test_yaml_syntax_error_is_located() -> None:
    assert problems_of("name: demo\nbase: [unclosed\n") == [
        "spec.yaml:3:1: (top level): YAML syntax: expected ',' or ']', but got '<stream end>'\n"
        "    fix: check indentation and quoting near this line (values with ':' or '#' need quotes)",
    ]


def test_duplicate_keys_are_refused() -> None:
    (problem,) = problems_of("name: demo\nbase: debootstrap:bookworm\nname: other\n")
    assert problem.startswith("spec.yaml:3:1: (top level): YAML syntax: duplicate key 'name' (key 'name' first given on line 1)")


def test_reserved_label_prefix() -> None:
    (problem,) = problems_of(MINIMAL + "labels:\n  org.envbuild.version: '9'\n")
    assert "uses the prefix org.envbuild., which envbuild writes itself" in problem


def test_empty_and_non_mapping_specs() -> None:
    assert problems_of("") == ["spec.yaml:1:1: (top level): the spec is empty\n    fix: start from envs/local-cpu-pytorch.yaml"]
    assert problems_of("- a\n- b\n")[0].startswith("spec.yaml:1:1: (top level): the spec must be a mapping of fields, not a list")


def test_host_checks_unknown_system_and_missing_files(tmp_path: Path) -> None:
    spec = tmp_path / "env.yaml"
    spec.write_text(MINIMAL + "system: lumi-gg\nfiles:\n  - {src: data/missing.txt, dest: /opt/x}\n")
    with pytest.raises(SpecError) as info:
        load_spec(spec)
    rendered = [p.render() for p in info.value.problems]
    assert rendered[0].startswith(f"{spec}:3:1: system: no system recipe named 'lumi-gg'")
    assert "did you mean 'lumi-g'?" in rendered[0]
    assert rendered[1].startswith(f"{spec}:5:6: files[0].src: 'data/missing.txt' does not exist")


def test_cli_validate_exit_codes(tmp_path: Path, repo: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nbase: debootstrap:bookworm\npython:\n  installer: conda\n")
    runner = CliRunner()
    ok = runner.invoke(main, ["validate", str(repo / "envs/local-cpu-pytorch.yaml")])
    assert ok.exit_code == 0 and "ok (local-cpu-pytorch, system local)" in ok.output
    result = runner.invoke(main, ["validate", str(bad)])
    assert result.exit_code == 2, "a spec's problems: a usage error, as from `envbuild build` (envbuild.shared.errors)"
    assert f"{bad}:4:3: python.installer: Input should be 'auto', 'uv' or 'pip'" in result.output
    assert "Traceback" not in result.output
    assert runner.invoke(main, ["validate"]).exit_code == 2, "no SPECS: a usage error"


def test_cli_validate_json(tmp_path: Path, repo: Path) -> None:
    """`envbuild validate --json`: the schema its --help documents (commands/validate.py VALIDATION_JSON)."""
    import json

    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nbase: debootstrap:bookworm\npython:\n  installer: conda\n")
    good = repo / "envs/local-cpu-pytorch.yaml"
    result = CliRunner().invoke(main, ["validate", "--json", str(good), str(bad), str(tmp_path / "missing.yaml")])
    assert result.exit_code == 2
    data = json.loads(result.stdout)
    assert data["ok"] is False and [f["ok"] for f in data["files"]] == [True, False, False]
    first, second, third = data["files"]
    assert first == {"file": str(good), "ok": True, "name": "local-cpu-pytorch", "system": "local", "problems": [],
                     "warnings": []}
    assert second["name"] is None and second["problems"] == [
        {"line": 4, "column": 3, "field": "python.installer", "message": second["problems"][0]["message"],
         "fix": second["problems"][0]["fix"]}]
    assert "Input should be 'auto', 'uv' or 'pip'" in second["problems"][0]["message"]
    assert third["problems"][0]["line"] is None and "no such file" in third["problems"][0]["message"]
    assert set(first) == {"file", "ok", "name", "system", "problems", "warnings"}
    clean = CliRunner().invoke(main, ["validate", "--json", str(good)])
    assert clean.exit_code == 0 and json.loads(clean.stdout)["ok"] is True


def test_cli_build_missing_spec_is_a_clear_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["build", str(tmp_path / "nope.yaml")])
    assert result.exit_code == 2
    assert "error: " in result.output and "nope.yaml: no such file" in result.output


def test_schema_is_json_schema_with_base_forms() -> None:
    import json

    result = CliRunner().invoke(main, ["schema"])
    schema = json.loads(result.output)
    assert result.exit_code == 0
    assert schema["properties"]["base"]["anyOf"][0]["type"] == "string"
    assert {"name", "base", "python", "env", "labels", "files", "post", "tests", "system"} <= set(schema["properties"])
    assert schema["additionalProperties"] is False


def test_env_shell_is_checked_and_kept_out_of_overlays() -> None:
    spec = load_spec_text(MINIMAL + 'env_shell: |\n  if [ -d /opt/x ]; then\n    export X="/opt/x"\n  fi\n').spec
    assert spec.env_shell == 'if [ -d /opt/x ]; then\n  export X="/opt/x"\nfi'
    (problem,) = problems_of(MINIMAL + "env_shell: |\n  export A=1\n  export B=\"two\n")
    assert problem.startswith("spec.yaml:") and "env_shell: a quote is not closed by the end of env_shell" in problem
    assert "fix: write it as a %environment section would run it" in problem
    overlay = "name: o\nbase: localimage:/x.sif\noverlay: {}\nenv_shell: export A=1\n"
    assert any("an overlay spec cannot have env_shell" in p for p in problems_of(overlay))
