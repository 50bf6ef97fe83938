"""The ``retold`` command line (LLD 16). It only calls library functions.

Errors are one line on stderr and a non-zero exit, never a traceback. Commands that
need no model never import torch.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from retold.config import Config, load_config
from retold.errors import RetoldError

__all__ = ["main"]

EXIT_ERROR = 1
EXIT_UNRESOLVED = 2  # LLD 16: migrate exits 2 while unmapped legacy rows remain


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--store", help="SQLite store file (default: store.path from config)")
    parser.add_argument("--config", help="config YAML (defaults apply without one)")
    parser.add_argument("--as", dest="actor", default="admin",
                        help="operator identity recorded on audit events (default: admin)")


def _config(args: argparse.Namespace) -> Config:
    overrides: dict[str, Any] = {}
    if args.store:
        overrides["store"] = {"path": args.store}
    return load_config(args.config, overrides=overrides)


def _cmd_migrate(args: argparse.Namespace) -> int:
    from retold.runtime import build_runtime

    with build_runtime(_config(args), allow_migration_issues=True) as rt:
        # Opening the store already applied pending migrations; report what it did.
        report = rt.store.migration_report or rt.store.migrate()
        applied = ", ".join(map(str, report.applied)) or "none pending"
        print(f"{rt.store.path}: schema version {report.version} (applied: {applied})")
        if report.unresolved:
            print(f"{report.unresolved} legacy records need review", file=sys.stderr)
            return EXIT_UNRESOLVED
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from retold.demo import run_smoke
    from retold.runtime import build_runtime

    print("retold demo: foundation smoke (the worker pipeline demo arrives with the workers)")
    with build_runtime(_config(args)) as rt:
        result = run_smoke(rt)
    print(f"done in {result.timings_ms['total']:.0f} ms")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The full parser; every command has help text (checked by a test)."""
    parser = argparse.ArgumentParser(
        prog="retold", description="Retold: durable, scoped, evidence-backed memory for AI agents."
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    migrate = commands.add_parser(
        "migrate", help="apply pending schema migrations to the store",
        description="Apply forward-only schema migrations; exit 2 while legacy rows need review.",
    )
    _common(migrate)
    migrate.set_defaults(run=_cmd_migrate)
    demo = commands.add_parser(
        "demo", help="run the end-to-end demo on a fresh store",
        description="Embed a few memories, store them, and read them back by meaning.",
    )
    _common(demo)
    demo.set_defaults(run=_cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``retold`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "run", None):
        parser.print_help()
        return EXIT_ERROR
    try:
        return int(args.run(args))
    except RetoldError as exc:
        print(f"retold {args.command}: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print(f"retold {args.command}: interrupted", file=sys.stderr)
        return 130
    except OSError as exc:
        print(f"retold {args.command}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":
    raise SystemExit(main())
