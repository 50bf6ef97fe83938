"""The command-line reference, docs/cli.md, rendered from the ``retold`` parser's own help.

Each command's section is what ``retold COMMAND --help`` prints, less the flags every
command shares, which the page lists once. The help is laid out at a fixed width, so the
page does not depend on the terminal it was made in; argparse's layout can change between
Python versions, so regenerate with the project's Python. ``tests/unit/test_cli_reference.py``
holds docs/cli.md equal to :func:`render`, so help changed without regenerating fails there.

Regenerate with ``python -m retold.cli.reference --write docs/cli.md``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from pathlib import Path

from retold.cli import build_parser
from retold.cli.common import COMMON_FLAGS

__all__ = ["main", "render"]

WIDTH = 100  # the help's line width, whatever the terminal

INTRO = """\
# Command line reference

<!-- Generated from the parser by `python -m retold.cli.reference --write docs/cli.md`.
Edit a command's help text in retold/cli/, then regenerate. -->

Every command's `--help`, as `retold COMMAND --help` prints it, without the flags every
command takes, which are listed once below. [operations.md](operations.md#command-line)
says what the commands are for and how their errors read.
"""


def render() -> str:
    """The whole page: the shared flags, then ``retold --help`` and each command's help."""
    parser = build_parser()
    commands = list(_commands(parser))
    first = commands[1][1]
    shared = [a for a in first._actions if a.dest in COMMON_FLAGS and a.option_strings]
    signatures = {_signature(a) for a in shared}
    sections = [INTRO, "## Flags every command takes\n", _block(_flags(first, shared))]
    for name, command in commands:
        # A command that gives a shared flag's name another meaning keeps it in its help.
        kept = [a for a in command._actions if command is parser or _signature(a) not in signatures]
        sections += [f"## {name}\n", _block(_help(command, kept))]
    return "\n".join(sections)


def _commands(parser: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """``parser`` and every command under it, as ``retold --help`` lists them."""
    yield parser.prog, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for command in action.choices.values():
                yield from _commands(command)


def _signature(action: argparse.Action) -> tuple[tuple[str, ...], str | None]:
    return tuple(action.option_strings), action.help


def _flags(parser: argparse.ArgumentParser, actions: list[argparse.Action]) -> str:
    """``actions`` laid out as ``parser``'s help lays out its options."""
    formatter = _formatter(parser)
    formatter.start_section("options")
    formatter.add_arguments(actions)
    formatter.end_section()
    return formatter.format_help()


def _help(parser: argparse.ArgumentParser, kept: list[argparse.Action]) -> str:
    """What ``parser.format_help()`` prints at :data:`WIDTH`, with only the ``kept``
    actions (argparse's own order of parts: usage, description, groups, epilog)."""
    formatter = _formatter(parser)
    formatter.add_usage(parser.usage, kept, parser._mutually_exclusive_groups)
    formatter.add_text(parser.description)
    for group in parser._action_groups:
        actions = [a for a in group._group_actions if a in kept]
        if not actions:
            continue
        formatter.start_section(group.title)
        formatter.add_text(group.description)
        formatter.add_arguments(actions)
        formatter.end_section()
    formatter.add_text(parser.epilog)
    return formatter.format_help()


def _formatter(parser: argparse.ArgumentParser) -> argparse.HelpFormatter:
    # Every command uses argparse's default layout; only the width is ours.
    return argparse.HelpFormatter(parser.prog, width=WIDTH)


def _block(text: str) -> str:
    return "```text\n" + text.rstrip() + "\n```\n"


def main(argv: list[str] | None = None) -> int:
    """``python -m retold.cli.reference [--write PATH]``: print the reference, or write it
    to a file."""
    parser = argparse.ArgumentParser(
        prog="python -m retold.cli.reference",
        description="Render the command-line reference (docs/cli.md) from the retold parser's help.")
    parser.add_argument("--write", metavar="PATH", help="write the reference here instead of printing it")
    args = parser.parse_args(argv)
    text = render()
    if args.write:
        Path(args.write).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
