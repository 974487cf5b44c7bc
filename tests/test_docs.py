"""Docs that cannot fall behind: firmware notes per protocol, help per command, README commands."""

from __future__ import annotations

import argparse
import os
import re
import subprocess
from pathlib import PurePosixPath

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


# --- every file the code and the docs cite is in the repository -----------------------------

#: The project's own design notes live outside the repository; nothing may send a reader there.
_DESIGN_NOTES = re.compile(r"\b(?:contract|law|facts|style)\.md\b|\.\./shared/design")
#: A cited file: a .md or .py name, or a file (name with an extension) under one of the
#: repository's top folders (so MQTT topics like ``frota/v1/ID/up`` are not taken for paths).
_TOP = "agent|bench|collector|docs|firmware-notes|frota|protocols|scripts|simulators|tests"
_CITED = re.compile(
    rf"(?<![\w/.-])((?:\.\./)*[\w.-]+(?:/[\w.-]+)*\.(?:md|py)|(?:{_TOP})/[\w./-]*\.[A-Za-z]\w*)(?![\w/-])"
)
#: Cited names that are not files of this repository, each with the reason.
_NOT_OURS = {
    "collector/rules/checks/door_opened.py": "docs/rules.md's example of a new rule to write",
    "can/interfaces/__init__.py": "python-can's, the model protocols/registry.py follows",
    "toy_rule.py": "written by test_rule_seam into a temporary folder",
    "toy.md": "the toy device's note, named by the test's registry entry",
}
_SCANNED = (".py", ".md", ".toml", ".sh", ".service", ".rules", ".json", ".yaml", ".yml")


def _tracked() -> list[str]:
    out = subprocess.run(
        ["git", "ls-files"], cwd=PROJECT, capture_output=True, text=True, check=True
    ).stdout
    return out.split()


def _resolves(cited: str, citing: str, tracked: set[str], names: set[str]) -> bool:
    if cited.startswith("../shared/corpora/"):  # test corpora, beside the repository in CI
        return True
    here = PurePosixPath(citing).parent
    for candidate in (cited, os.path.normpath(str(here / cited))):
        candidate = candidate.rstrip("/")
        if candidate in tracked or any(t.startswith(candidate + "/") for t in tracked):
            return True
    return "/" not in cited and cited in names


def test_code_and_docs_cite_only_files_in_the_repository() -> None:
    files = _tracked()
    tracked = set(files)
    names = {PurePosixPath(f).name for f in files}
    missing: list[str] = []
    for path in files:
        if not path.endswith(_SCANNED) and path != ".ci/run":
            continue
        text = (PROJECT / path).read_text(encoding="utf-8", errors="replace")
        for number, line in enumerate(text.splitlines(), 1):
            if _DESIGN_NOTES.search(line):
                missing.append(f"{path}:{number}: cites a design note outside the repository")
            if path == "CHANGELOG.md":  # history names files since removed
                continue
            for match in _CITED.finditer(line):
                cited = match.group(1)
                if cited not in _NOT_OURS and not _resolves(cited, path, tracked, names):
                    missing.append(f"{path}:{number}: {cited}")
    assert not missing, "cited but not in the repository:\n" + "\n".join(missing)
