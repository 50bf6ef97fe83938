"""``retold export`` and ``import``: one scope's memory as a file, and back into a store."""

from __future__ import annotations

import argparse
import sys
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from retold.cli.common import (
    EXIT_REFUSED,
    Refused,
    actor,
    add_command,
    cli_config,
    cli_runtime,
    missing_store_of,
    scope_arg,
)

__all__ = ["register"]


def _cmd_export(args: argparse.Namespace) -> int:
    # A file is written beside its name and renamed when whole, so an export refused half
    # way (a damaged store) never leaves a file that looks complete.
    partial = Path(f"{args.out}.partial") if args.out else None
    try:
        with cli_runtime(args, models=False) as rt, \
                (partial.open("w", encoding="utf-8") if partial else nullcontext(sys.stdout)) as out:
            result = rt.operations.export(args.scope, out, include_history=args.include_history,
                                          include_events=args.include_events)
        if partial:
            partial.replace(args.out)
    finally:
        if partial:
            partial.unlink(missing_ok=True)
    # The summary goes where the lines do not: stdout when they went to a file, so a healthy
    # run says nothing on stderr.
    print(f"exported {result.records} records ({result.vectors} with vectors), {result.entities} entities"
          f" and {result.events} events of {result.scope} in {result.seconds:.1f} s",
          file=sys.stdout if partial else sys.stderr)
    return 0


def _progress(done: int, total: int) -> None:
    if sys.stderr.isatty():
        width = 30
        filled = width * done // max(total, 1)
        print(f"\r[{'#' * filled}{'.' * (width - filled)}] {done:,}/{total:,} records", end="",
              file=sys.stderr, flush=True)


def _cmd_import(args: argparse.Namespace) -> int:
    from retold.models import Principal
    from retold.portable.lines import ImportRefused

    path = Path(args.file)
    if not path.is_file():
        raise Refused(f"no file {args.file}")
    config = cli_config(args)
    if (missing := missing_store_of(config)) is not None:
        if config.store.url:
            raise Refused(missing)
        # The file an import needs is a store its agent may write: say how to make that one.
        raise Refused(f"no store at {config.store.path}; {_how_to_create(config.store.path, path, args)}")
    principal = Principal(args.agent, args.user, None, args.project)
    with cli_runtime(args) as rt, path.open(encoding="utf-8") as lines:
        try:
            result = rt.operations.import_lines(lines, principal, into=args.into, confirm=args.confirm,
                                                actor=actor(args), progress=_progress,
                                                from_tenant=args.from_tenant)
        except ImportRefused as err:
            raise Refused(str(err), EXIT_REFUSED) from None
    if sys.stderr.isatty():
        print(file=sys.stderr)
    print(f"imported {result.created} records into {result.scope} ({result.unchanged} already there,"
          f" {len(result.failed)} failed); entities: {result.entities_created} created,"
          f" {result.entities_matched} matched; {result.embedded} vectors computed here;"
          f" {result.seconds:.1f} s")
    if result.created and not args.confirm:
        print("live records landed provisional: confirm them with memory_revise, or import with --confirm")
    for note in result.notes:
        print(note, file=sys.stderr)
    for failure in result.failed:
        print(f"line {failure.line}: {failure.reason}", file=sys.stderr)
    return EXIT_REFUSED if result.failed else 0


def _how_to_create(store: str, path: Path, args: argparse.Namespace) -> str:
    """How to make the store an import into ``store`` needs: one the agent may write."""
    from retold.portable.lines import ImportRefused, read_header

    scope = args.into
    if scope is None:
        try:
            with path.open(encoding="utf-8") as lines:
                scope = read_header(lines.readline()).scope
        except (ImportRefused, OSError, UnicodeDecodeError):
            scope = None  # the import itself reports what is wrong with the file
    if scope is None or scope.is_private:
        # The agent's own scope needs no grant: an empty store is all it takes.
        return f"create an empty one with `retold migrate --store {store}`, then import again"
    return (f"create it, with a grant that lets {args.agent} write {scope}, by running"
            f" `retold grant {args.agent} {scope} --read --write --store {store}`, then import again")


def register(commands: Any) -> None:
    """Add ``export`` and ``import``."""
    export = add_command(commands, "export", _cmd_export, "write one scope's memory as a JSON-lines file",
                         "Write a header line, the entities the scope's records link, and one line per"
                         " record (lineage, evidence, source, links, conflicts, activation, pin, vector)"
                         " to stdout or --out. Forgotten records are never exported.")
    export.add_argument("--scope", required=True, type=scope_arg, help="scope as kind:id, e.g. user:aditya")
    export.add_argument("--include-history", action="store_true",
                        help="also superseded and expired records, so lineage arrives whole")
    export.add_argument("--include-events", action="store_true", help="also the records' audit events")
    export.add_argument("--out", help="write to this file instead of stdout")

    imp = add_command(commands, "import", _cmd_import, "import an export file as one agent and user",
                      "Import an export file through the write path's checks: the scope must be"
                      " writable by --agent for --user, credentials are refused, entities are matched"
                      " by alias or created, vectors are recomputed unless the embedding family"
                      " matches. Live records land provisional unless --confirm. Importing the same"
                      " file twice changes nothing; each failed line is reported with its number"
                      " (exit 2) and the others still land.")
    imp.add_argument("file", help="the export file")
    imp.add_argument("--agent", required=True, help="the agent the import writes as")
    imp.add_argument("--user", required=True, help="the user the import writes for")
    imp.add_argument("--project", help="the principal's project, when its grants need one")
    imp.add_argument("--into", type=scope_arg, help="land every record in this scope instead of the file's")
    imp.add_argument("--from-tenant", help="accept a file exported from this other tenant (else refused)")
    imp.add_argument("--confirm", action="store_true",
                     help="keep each record's status (the operator vouches for the file)")
