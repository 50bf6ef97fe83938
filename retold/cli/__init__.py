"""The ``retold`` command line: maintenance, debugging, operator views and evaluation over
one store. It only calls library functions, so it follows the same store and lifecycle
rules as agents. Each group of commands lives in its own module and adds itself to the
parser through ``register``.

Errors are one line on stderr and a non-zero exit, with a traceback only when ``-v`` asks
for one (see :mod:`retold.cli_failure`). Commands that need no model never import torch:
everything heavy is imported inside the command that needs it, and :mod:`retold.runtime`
loads models lazily. Third-party progress bars are silenced before any command runs.
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
from collections.abc import Sequence

from retold.cli import (
    access,
    audit,
    bundles,
    check,
    maintenance,
    members,
    migrate_store,
    observe,
    pack,
    portable,
    quality,
    records,
    retry,
    reviews,
    serve,
    tenants,
    tokens,
    ui,
)
from retold.cli.common import Parser, Refused
from retold.cli_failure import EXIT_ERROR, logged_warnings, report_failure
from retold.errors import RetoldError
from retold.quiet import silence_progress_output

__all__ = ["build_parser", "main"]


def build_parser() -> Parser:
    """The full parser; every command has help and description text (checked by a test)."""
    parser = Parser(
        prog="retold", description="Retold: durable, scoped, evidence-backed memory for AI agents."
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    for group in (maintenance, migrate_store, retry, check, serve, records, portable, access, members,
                  reviews, audit, observe, bundles, ui, tenants, pack, tokens, quality):
        group.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``retold`` console script."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:
        # Answered by the command's own parser, which can show that command's usage.
        commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        command = commands.choices.get(args.command) if args.command else None
        (command if isinstance(command, Parser) else parser).unrecognized(extra)
    if not getattr(args, "run", None):
        parser.print_help()
        return EXIT_ERROR
    silence_progress_output()
    try:
        with logged_warnings(args.command, verbose=args.verbose):
            return int(args.run(args))
    except Refused as exc:
        print(f"retold {args.command}: {exc}", file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        print(f"retold {args.command}: interrupted", file=sys.stderr)
        return 130
    except (RetoldError, OSError, sqlite3.Error, ValueError) as exc:  # see retold.cli_failure
        return report_failure(args.command, exc, verbose=args.verbose)
