"""What the docs name exists: repository paths and module names in README.md, docs/**/*.md (and the READMEs
of examples/ and provision/) and the sources under envbuild/; every documented `envbuild ...` / `envrun ...`
command line parses with the real parsers, and every option the prose names exists.

Only parsing: click's `make_context` and argparse's `parse_args` check the words against the definitions,
nothing runs. A moved module shows up here as the docstrings and pages that still name it.
"""

from __future__ import annotations

import argparse
import re
import shlex
import warnings
from pathlib import Path

import click
import pytest

from tests.docs.test_reference_current import load_generator

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md"),
               *(path for folder in ("examples", "provision", "bench", "tests") for path in (ROOT / folder).glob("README.md"))])
SOURCES = sorted((ROOT / "envbuild").rglob("*.py"))
GENERATED = {ROOT / "docs" / "reference" / name for name in ("cli.md", "spec.md", "modules.md")}  # their sources are checked

# Folders of this repository a path in the docs starts with; package-relative names (`builder/plan/imageplan.py`) are
# looked up under envbuild/ (and tests/), as the docstrings write them.
TOP_DIRS = ("envbuild", "tests", "bench", "examples", "envs", "recipes", "provision", "docs")
_PATH = re.compile(r"(?<![\w./~$-])((?:[A-Za-z_][\w.-]*/)+[\w.*-]+\.(?:py|md|yaml|yml|sh|lock|png|json))(?![\w/])")
_TOP_PATH = re.compile(r"(?<![\w./~$-])((?:" + "|".join(TOP_DIRS) + r")/[\w./*-]*[\w*])/?(?![\w/])")
_LINK = re.compile(r"\]\((?!https?:|mailto:)([^)#\s]*)(?:#([^)\s]*))?\)")
_MODULE = re.compile(r"(?<![\w./-])(envbuild(?:\.[a-z_][a-z0-9_]*)+)")
# Paths of other projects, inside images or stores, in the wheel, and placeholders, named on purpose:
# torch/version.py, deepspeed/launcher/runner.py, conda-meta/*.json, cotainr's cli.py, a store's envs/*/,
# the run wrappers' bin/python, the wheel's envbuild/_recipes, a user's envs/x.yaml.
_ELSEWHERE = re.compile(r"^(torch|deepspeed|conda-meta|cli\.py|internal|site-packages|usr|etc|opt|tmp|appl|bin|"
                        r"\.envbuild|\.singularity\.d|envs/\*/|envbuild/_recipes|envs/(x|foo|myenv|env)\.|"
                        r"[A-Z]+/|.*\{|.*<)")


def _exists(name: str, bases: tuple[Path, ...]) -> bool:
    return any(list(base.glob(name)) if "*" in name else (base / name).exists() for base in bases)


def _module_exists(dotted: str) -> bool:
    """`envbuild.a.b` is a module or package, or a name defined at the top of one (`envbuild.a.b.func`)."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        base = ROOT.joinpath(*parts[:cut])
        for module in (base.with_suffix(".py"), base / "__init__.py"):
            if module.is_file():
                rest = parts[cut:]
                if not rest or rest[0].startswith("__"):
                    return True
                defined = re.compile(rf"^(def |class |){re.escape(rest[0])}\b", re.M)
                return len(rest) == 1 and defined.search(module.read_text()) is not None
    return False


def _anchors(markdown: str) -> set[str]:
    """The anchors a page offers: `<a id="...">` and its headings as GitHub slugs them."""
    ids = set(re.findall(r'<a id="([^"]+)"', markdown))
    headings = re.findall(r"^#+\s+(.*)$", markdown, re.M)
    return ids | {re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-") for heading in headings}


def _named_paths(text: str) -> set[str]:
    found = {m.group(1) for m in _TOP_PATH.finditer(text)}
    found |= {m.group(1) for m in _PATH.finditer(text)}
    return {name for name in found if not _ELSEWHERE.match(name)}


def _broken_names(path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8")
    bases = (ROOT, ROOT / "envbuild", ROOT / "tests", ROOT / "docs", path.parent)
    broken = [f"path {name}" for name in sorted(_named_paths(text)) if not _exists(name, bases)]
    if path.suffix == ".md":  # a link is relative to its page; an anchor names an id or a heading there
        for target, anchor in sorted({(m.group(1), m.group(2) or "") for m in _LINK.finditer(text)}):
            page = path.parent / target if target else path
            if not page.exists():
                broken.append(f"link {target}")
            elif anchor and page.suffix == ".md" and anchor not in _anchors(page.read_text(encoding="utf-8")):
                broken.append(f"link {target}#{anchor}")
    broken += [f"module {name}" for name in sorted({m.group(1).rstrip(".") for m in _MODULE.finditer(text)})
               if not _module_exists(name)]
    return broken


@pytest.mark.parametrize("path", [p for p in DOCS + SOURCES if p not in GENERATED], ids=lambda p: str(p.relative_to(ROOT)))
def test_named_paths_and_modules_exist(path):
    broken = _broken_names(path)
    assert not broken, f"{path.relative_to(ROOT)} names what is not in the repository: {'; '.join(broken)} (fix: the new path)"


def _bash_blocks(text: str) -> list[tuple[int, str]]:
    """(line number, command) of each command in ```bash blocks, continuation lines joined."""
    commands: list[tuple[int, str]] = []
    in_block, pending, start = False, "", 0
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith("```"):
            in_block = line.strip() in ("```bash", "```sh", "```console")
            continue
        if not in_block:
            continue
        if not pending:
            start = number
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        commands.append((start, pending + line))
        pending = ""
    return commands


def _tool_lines(command: str) -> list[list[str]]:
    """The `envbuild ...` / `envrun ...` parts of a shell line, as words (comments, `&&`, `;`, `|` split off)."""
    try:
        words = shlex.split(command, comments=True)
    except ValueError:
        return []
    parts, current = [], []
    for word in [*words, ";"]:
        if word in ("&&", "||", ";", "|", "&"):
            parts.append(current)
            current = []
        else:
            current.append(word)
    found = []
    for part in parts:
        while part and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", part[0]):  # VAR=value before the command
            part = part[1:]
        if part and part[0] in ("envbuild", "envrun", "bin/envbuild", "bin/envrun"):
            found.append([part[0].rsplit("/", 1)[-1], *part[1:]])
    return found


class _Refused(Exception):
    pass


def _strict(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    def error(message: str) -> None:
        raise _Refused(message)

    def leave(status: int = 0, message: str | None = None) -> None:
        raise _Refused(message or "exit") if status else SystemExit(0)

    parser.error = error  # type: ignore[method-assign]
    parser.exit = leave  # type: ignore[method-assign]
    return parser


def _unparsed(ctx: click.Context) -> list[str]:
    """The words a group left for its subcommand (click 8.2 deprecates `protected_args`; 9 puts them in `args`)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return [*getattr(ctx, "protected_args", ()), *ctx.args]


def parse_error(words: list[str]) -> str | None:
    """Why the tool's parser refuses these words, or None when it accepts them."""
    generator = load_generator()
    if words[0] == "envrun":
        subcommand = words[1] if len(words) > 1 and words[1] in generator.envrun_subcommands() else None
        parser = _strict(generator.envrun_parser(subcommand))
        try:
            parser.parse_args(words[2:] if subcommand else words[1:])
        except _Refused as exc:
            return str(exc)
        except SystemExit:
            pass
        return None
    command: click.Command = generator.envbuild_group()
    args, parent = words[1:], None
    try:
        while True:
            ctx = command.make_context(words[0] if parent is None else command.name, list(args), parent=parent)
            if not isinstance(command, click.Group):
                return None
            rest = _unparsed(ctx)
            if not rest:
                return None
            _, sub, args = command.resolve_command(ctx, rest)
            if sub is None:
                return f"no command {rest[0]}"
            command, parent = sub, ctx
    except click.exceptions.Exit:
        return None
    except click.ClickException as exc:
        return exc.format_message()


def _documented_commands() -> list[tuple[str, list[str]]]:
    found = []
    for path in DOCS:
        if path in GENERATED:
            continue
        for number, line in _bash_blocks(path.read_text(encoding="utf-8")):
            found.extend((f"{path.relative_to(ROOT)}:{number}", words) for words in _tool_lines(line))
    return found


@pytest.mark.parametrize(("where", "words"), _documented_commands(), ids=lambda value: value if isinstance(value, str) else "")
def test_documented_command_lines_parse(where, words):
    error = parse_error(words)
    assert error is None, f"{where}: `{shlex.join(words)}` is refused by the parser: {error} (fix: the command line in the docs)"


def _options_of(words: list[str]) -> tuple[dict[str, bool], list[str]] | str:
    """The options the command that `words` names accepts (name -> takes a value) and the words after its name;
    or the word that names no subcommand."""
    generator = load_generator()
    if words[0] == "envrun":
        subcommand = words[1] if len(words) > 1 and words[1] in generator.envrun_subcommands() else None
        parser = generator.envrun_parser(subcommand)
        options = {name: action.nargs != 0 for action in parser._actions for name in action.option_strings}
        return options, words[2:] if subcommand else words[1:]
    command: click.Command = generator.envbuild_group()
    # Contexts chained as click chains them: a command caches its help option with the names its context
    # gives (-h, --help from the group's settings), so a context without its parent would change --help texts.
    ctx = click.Context(command, info_name=words[0], **command.context_settings)
    rest = words[1:]
    while isinstance(command, click.Group) and rest and not rest[0].startswith("-"):
        sub = command.get_command(ctx, rest[0])
        if sub is None:
            return rest[0]
        command, rest = sub, rest[1:]
        ctx = click.Context(command, info_name=command.name, parent=ctx, **command.context_settings)
    options = {name: not (getattr(param, "is_flag", False) or getattr(param, "count", False))
               for param in command.get_params(ctx) for name in (*param.opts, *param.secondary_opts) if name.startswith("-")}
    return options, rest


def unknown_options(words: list[str]) -> list[str]:
    """The option words in a mention such as `envrun sbatch --print` that its command does not have: what a
    renamed option leaves behind in the prose. Values and the training command after `--` are not looked at."""
    found = _options_of(words)
    if isinstance(found, str):
        return [found]  # no such subcommand
    options, rest = found
    unknown, index = [], 0
    while index < len(rest):
        word = rest[index]
        if word == "--" or (words[0] == "envrun" and not word.startswith("-")):
            break  # envrun's own options end where the command starts
        name = word.split("=", 1)[0]
        if word.startswith("-") and word != "-":
            if name not in options and not re.fullmatch(r"-[A-Za-z]\S+", word):  # -B/path: a short option and its value
                unknown.append(name)
            index += 1 if "=" in word or not options.get(name, False) else 2
            continue
        index += 1
    return unknown


def _mentioned_commands() -> list[tuple[str, list[str]]]:
    """`envbuild ...` / `envrun ...` in inline code in the prose (not in code blocks)."""
    found = []
    for path in DOCS:
        if path in GENERATED:
            continue
        text = path.read_text(encoding="utf-8")
        prose = re.sub(r"```.*?```", lambda block: "\n" * block.group(0).count("\n"), text, flags=re.S)
        for match in re.finditer(r"(?<!`)`((?:envbuild|envrun) [^`]+)`(?!`)", prose):
            try:
                words = shlex.split(match.group(1).replace("...", " "))
            except ValueError:
                continue
            words = [part.strip("[]") for word in words for part in word.split("|") if part.strip("[]")]  # [--a|--b]
            found.append((f"{path.relative_to(ROOT)}:{prose.count(chr(10), 0, match.start()) + 1}", words))
    return found


@pytest.mark.parametrize(("where", "words"), _documented_commands() + _mentioned_commands(),
                         ids=lambda value: value if isinstance(value, str) else "")
def test_documented_options_exist(where, words):
    unknown = unknown_options(words)
    assert not unknown, f"{where}: `{shlex.join(words)}` names {', '.join(unknown)}, which the command does not have (fix: the docs)"


def test_the_checker_sees_bad_names_and_bad_options(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("`envbuild/batch/resources.py`, `envbuild.commands.buildcommand`, `envbuild/cli/lazygroup.py`, "
                    "envbuild.cli.lazygroup.LazyGroup, [a page](nowhere.md), [the spec](../../envs/x.yaml), [up](#no-heading)\n")
    (tmp_path / "nowhere.md").write_text("")  # exists beside the page: a link, not a repository path
    assert _broken_names(page) == ["path envbuild/batch/resources.py", "link #no-heading", "link ../../envs/x.yaml",
                                   "module envbuild.commands.buildcommand"]
    assert parse_error(["envbuild", "build", "x.yaml", "--no-such-option"]) is not None
    assert parse_error(["envbuild", "build", "x.yaml", "--dry-run"]) is None
    assert parse_error(["envbuild", "cache", "prune", "--older-than", "30d"]) is None
    assert parse_error(["envrun", "sbatch", "--nodes", "two"]) is not None
    assert parse_error(["envrun", "--image", "x.sif", "srun", "torchrun", "train.py"]) is None
    assert unknown_options(["envrun", "sbatch", "--no-such", "--nodes", "2", "--", "python", "--x"]) == ["--no-such"]
    assert unknown_options(["envbuild", "cache", "prune", "--older-than", "30d", "--bogus"]) == ["--bogus"]
    assert unknown_options(["envrun", "-B/data", "--image", "x.sif", "python", "--lr", "3"]) == []
    assert unknown_options(["envbuild", "cache", "purge", "--all"]) == ["purge"]
