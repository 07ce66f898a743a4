"""The docs cannot drift from the CLI: every command line they show parses, and every command and
option the CLI has is in the CLI reference."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import typer.main

from gym_compose.cli.main import app

REPO = Path(__file__).resolve().parents[2]
CLI_REFERENCE = REPO / "docs" / "cli.md"
DOC_FILES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def command_tree() -> dict:
    """Every command by its path of words, e.g. ("eval", "run")."""
    tree: dict = {}

    def walk(command, path: tuple[str, ...]) -> None:
        tree[path] = command
        if is_group(command):
            for name, sub in command.commands.items():
                walk(sub, (*path, name))

    walk(typer.main.get_command(app), ())
    return tree


def is_group(command) -> bool:
    return hasattr(command, "commands")  # typer may bring its own click: no isinstance checks


def option_names(command) -> set[str]:
    return {name for param in command.params if param.param_type_name == "option"
            for name in (*param.opts, *param.secondary_opts)} | {"--help"}


def shown_command_lines() -> list[tuple[Path, int, list[str]]]:
    """`gym-compose ...` lines of the docs' shell code blocks, continuation lines joined, as argv words."""
    found = []
    for path in DOC_FILES:
        in_block, pending, start = False, "", 0
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            fence = line.strip()
            if fence.startswith("```"):  # shell blocks only: others show output or files
                in_block, pending = (not in_block and fence[3:] in ("bash", "sh", "shell", "console")), ""
                continue
            if not in_block:
                continue
            text = pending + line.split(" #")[0].rstrip()
            if text.endswith("\\"):
                pending, start = text[:-1] + " ", start or number
                continue
            pending = ""
            match = re.search(r"(?:^|[\s;&|(])(?:\S*/)?gym-compose (.*)", text)
            if match:
                words = shlex.split(match.group(1).split("|")[0].split("&&")[0].split(";")[0])
                found.append((path, start or number, words))
            start = 0
    return found


def resolve_words(words: list[str], tree) -> tuple[tuple[str, ...], list[str]]:
    path: tuple[str, ...] = ()
    for index, word in enumerate(words):
        if (*path, word) in tree:
            path = (*path, word)
        else:
            return path, words[index:]
    return path, []


def test_the_docs_show_command_lines():
    assert len(shown_command_lines()) > 20


@pytest.mark.parametrize("path, line, words", shown_command_lines(),
                         ids=lambda v: v.name if isinstance(v, Path) else (str(v) if isinstance(v, int) else " ".join(v)[:40]))
def test_every_command_line_in_the_docs_uses_real_commands_and_options(path, line, words):
    tree = command_tree()
    command_path, rest = resolve_words(words, tree)
    assert command_path, f"{path.name}:{line}: `gym-compose {' '.join(words)}` names no command"
    command = tree[command_path]
    assert not is_group(command), f"{path.name}:{line}: `{' '.join(command_path)}` needs a subcommand"
    known = option_names(command)
    for word in rest:
        if word.startswith("--") or re.fullmatch(r"-[a-zA-Z]", word):
            option = word.split("=", 1)[0]
            assert option in known, (f"{path.name}:{line}: `gym-compose {' '.join(command_path)}` has no option "
                                     f"{option} (it has {', '.join(sorted(known))})")


def test_the_cli_reference_names_every_command_and_option():
    reference = CLI_REFERENCE.read_text(encoding="utf-8")
    missing = []
    for command_path, command in command_tree().items():
        if not command_path:
            continue
        if f"`{' '.join(command_path)}" not in reference and f"| `{command_path[-1]}" not in reference:
            missing.append(" ".join(command_path))
        for option in option_names(command) - {"--help"}:
            if not option.startswith("--"):
                continue
            if not re.search(re.escape(option) + r"(?![\w-])", reference):
                missing.append(f"{' '.join(command_path)} {option}")
    assert not missing, f"docs/cli.md does not mention: {', '.join(sorted(set(missing)))}"
