"""docs/cli.md is the ``retold`` parser's help rendered by retold.cli.reference.

Change a command's help text, then regenerate:
``python -m retold.cli.reference --write docs/cli.md``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from retold.cli import build_parser
from retold.cli.reference import main, render

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "cli.md"


def test_the_cli_page_is_the_rendered_help() -> None:
    assert DOC.read_text(encoding="utf-8") == render(), (
        "docs/cli.md is stale: run python -m retold.cli.reference --write docs/cli.md")


def test_every_command_has_a_section_with_its_own_flags() -> None:
    doc = render()
    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    for name, command in commands.choices.items():
        section = doc.split(f"\n## retold {name}\n", 1)[1].split("\n## ", 1)[0]
        assert f"usage: retold {name}" in section, name
        for action in command._actions:
            if action.option_strings and action.dest not in {"help", "store", "tenant", "config", "actor",
                                                              "verbose"}:
                assert max(action.option_strings, key=len) in section, (name, action.dest)


def test_the_shared_flags_are_listed_once_and_a_commands_own_meaning_stays() -> None:
    doc = render()
    assert doc.count("--store STORE") == 1 and doc.count("--as ACTOR ") == 1
    reviews = doc.split("\n## retold reviews\n", 1)[1].split("\n## ", 1)[0]
    assert "--as {ambient,conditional,reject}" in reviews and "--actor ACTOR" in reviews


def test_main_writes_the_page(tmp_path: Path) -> None:
    out = tmp_path / "cli.md"
    assert main(["--write", str(out)]) == 0
    assert out.read_text(encoding="utf-8") == render()
