"""Docs that cannot fall behind: firmware notes per protocol, help per command, README commands."""

from __future__ import annotations

import argparse
import re

import pytest

from frota.cli import build_parser
from protocols import registry
from tests.services import PROJECT


def _subcommands(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> list[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    found = [(path, parser)]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found.extend(_subcommands(sub, (*path, name)))
    return found


@pytest.mark.parametrize("name", registry.names())
def test_every_protocol_has_a_firmware_note(name: str) -> None:
    info = registry.get(name)
    note = PROJECT / "firmware-notes" / info.firmware_note
    assert note.is_file(), f"protocol {name} has no firmware note at {note}"
    assert "```" in note.read_text(), f"{note} has no hex vectors / examples"


def test_every_command_has_help_text() -> None:
    for path, parser in _subcommands(build_parser()):
        assert parser.description or path == (), f"frota {' '.join(path)} has no description"
        text = parser.format_help()
        assert "usage: frota" in text


def test_every_command_is_in_the_readme() -> None:
    readme = (PROJECT / "README.md").read_text()
    for path, _parser in _subcommands(build_parser()):
        if len(path) == 1:
            assert f"frota {path[0]}" in readme, f"README does not mention `frota {path[0]}`"


def test_readme_quickstart_is_two_commands_and_ci_runs_the_test_one() -> None:
    readme = (PROJECT / "README.md").read_text()
    block = readme.split("## Quickstart", 1)[1].split("```sh", 1)[1].split("```", 1)[0]
    commands = [line.split("#", 1)[0].strip() for line in block.strip().splitlines()]
    assert len(commands) == 2, commands
    demo, test = commands
    assert "demo" in demo
    assert "test" in test
    ci = (PROJECT / ".ci" / "run").read_text()
    assert re.search(rf"^exec {re.escape(test)}$", ci, re.MULTILINE), ci
