"""The ``retold`` command line: maintenance, debugging and evaluation over one store. It
only calls library functions, so it follows the same store and lifecycle rules as agents.

Errors are one line on stderr and a non-zero exit, with a traceback only when ``-v`` asks
for one (see :mod:`retold.cli_failure`). Commands that need no model never import torch:
everything heavy is imported inside the command that needs it, and :mod:`retold.runtime`
loads models lazily.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from retold.cli_failure import EXIT_ERROR, report_failure
from retold.cli_profile import register as register_profile_commands
from retold.config import Config
from retold.config_env import load_config_from_environment
from retold.errors import RetoldError
from retold.models import Scope
from retold.util import to_plain

if TYPE_CHECKING:
    from retold.models import Record
    from retold.runtime import Runtime

__all__ = ["build_parser", "main"]

EXIT_UNRESOLVED = 2  # migrate exits 2 while unmapped legacy rows remain
EXIT_REFUSED = 2  # an irreversible command without --yes
EXIT_PENDING = 3  # extract: no hosted model is configured, so the session stays pending
EXIT_USAGE = 2  # mcp: a transport asked for without what it needs (identity, tokens, the extra)


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (the CLI contract: one line on stderr, exit 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message}\n")


class _Refused(Exception):
    """A command refused to run as asked; the message is the one line to print."""

    def __init__(self, message: str, code: int = EXIT_ERROR) -> None:
        super().__init__(message)
        self.code = code


# -- shared plumbing -------------------------------------------------------------------------


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--store", help="SQLite store file (default: $RETOLD_STORE, else store.path "
                        "from the config)")
    parser.add_argument("--config", help="config YAML (default: $RETOLD_CONFIG; defaults apply without "
                        "either)")
    parser.add_argument("--as", dest="actor", default=None,
                        help="operator identity recorded on audit events (default: admin)")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="after a one-line error, print its causes and traceback")


def _config(args: argparse.Namespace) -> Config:
    """The config as workers and agents find it (the file, then RETOLD_* variables), with
    this command's flags on top."""
    overrides: dict[str, Any] = {}
    if args.store:
        overrides["store"] = {"path": args.store}
    return load_config_from_environment(os.environ, args.config, overrides)


def _actor(args: argparse.Namespace, default: str = "admin") -> str:
    return str(args.actor or default)


def _runtime(args: argparse.Namespace, *, existing: bool = True, repairs: bool = False) -> Runtime:
    """Build the runtime; ``existing`` refuses a store path that does not exist yet, so a
    mistyped path never creates an empty store. ``repairs`` marks a command that fixes or
    replaces the store's vectors, so it may open a store of another embedding family."""
    from retold.runtime import build_runtime

    config = _config(args)
    if existing and config.store.path != ":memory:" and not Path(config.store.path).exists():
        raise _Refused(f"no store at {config.store.path}")
    return build_runtime(config, allow_embedding_mismatch=repairs)


def _scope(text: str) -> Scope:
    try:
        return Scope.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _record_json(record: Record) -> dict[str, Any]:
    data: dict[str, Any] = to_plain(record)
    return data


def _print_json(value: Any) -> None:
    print(json.dumps(to_plain(value), indent=2, ensure_ascii=False, default=str))


# -- commands ----------------------------------------------------------------------------------


def _cmd_migrate(args: argparse.Namespace) -> int:
    from retold.runtime import build_runtime

    with build_runtime(_config(args), allow_migration_issues=True, allow_embedding_mismatch=True) as rt:
        # Opening the store already applied pending migrations; report what it did.
        result = rt.operations.migrate(expire_unmapped=args.expire_unmapped,
                                  allow_unmapped=args.allow_unmapped, actor=_actor(args))
        applied = ", ".join(map(str, result.applied)) or "none pending"
        print(f"{rt.store.path}: schema version {result.version} (applied: {applied})")
        family = rt.store.embedding_family()
        print(f"  embedding family: {family or 'none recorded'}")
        for note in result.notes:
            print(f"  {note}")
        for issue in result.issues:
            state = "expired" if issue.record_id in result.expired else "unresolved"
            print(f"  {issue.record_id}  migration {issue.migration_version}: {issue.issue} [{state}]")
        if result.unresolved and not args.allow_unmapped:
            print(f"{result.unresolved} legacy records need review; retire them with --expire-unmapped"
                  " or acknowledge them with --allow-unmapped", file=sys.stderr)
            return EXIT_UNRESOLVED
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from retold.demo import run_demo
    from retold.util import Timer

    timer = Timer()
    store = Path(args.store or ".demo/memory.sqlite").resolve()
    result = run_demo(store.parent, store_name=store.name)
    timer.mark("demo")
    print(f"\ndone in {timer.as_dict()['total'] / 1000:.1f} s; store: {result.store_path}")
    return 0


def _cmd_search(args: argparse.Namespace) -> int:
    query = " ".join(args.query).strip()
    with _runtime(args) as rt:
        report = rt.operations.search(args.agent, args.user, query, project_id=args.project, k=args.k)
    response = report.outcome.response
    log = {key: _maybe_json(value) for key, value in report.log.items()}
    if args.json:
        _print_json({
            "search_id": response.search_id, "rendered": report.outcome.rendered,
            "empty_reason": response.empty_reason, "timings_ms": response.timings_ms,
            "results": [{"id": r.record.id, "score": r.score, "content": r.record.content,
                         "status": r.record.status, "scope": str(r.record.scope)}
                        for r in response.results],
            "log": log,
        })
        return 0
    print(report.outcome.rendered)
    print(f"\nsearch_log row {response.search_id}:")
    _print_json(log)
    return 0


def _maybe_json(value: Any) -> Any:
    if isinstance(value, str) and value[:1] in "[{":
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _cmd_get(args: argparse.Namespace) -> int:
    with _runtime(args) as rt:
        detail = rt.operations.get(args.id)
    _print_json({"record": _record_json(detail.record),
                 "lineage": [{"id": r.id, "version": r.version, "status": r.status,
                              "created_at": r.created_at} for r in detail.lineage],
                 "conflicts": detail.conflicts, "events": detail.events})
    return 0


def _cmd_dump(args: argparse.Namespace) -> int:
    with _runtime(args) as rt:
        records = rt.operations.dump(args.scope)
    for record in records:
        if args.json:
            print(json.dumps(_record_json(record), ensure_ascii=False))
        else:
            print(f"{record.id}\t{record.status}\t{record.type}\t{record.subject}\t{record.content}")
    if not args.json:
        print(f"{len(records)} active records in {args.scope}", file=sys.stderr)
    return 0


def _cmd_expire(args: argparse.Namespace) -> int:
    with _runtime(args) as rt:
        count = rt.operations.expire(_actor(args))
    print(f"expired {count} records")
    return 0


def _cmd_retain(args: argparse.Namespace) -> int:
    with _runtime(args) as rt:
        count = rt.operations.retain(_actor(args))
        days = rt.config.sessions.retain_days
    print(f"blanked the transcripts of {count} sessions (extracted, ended more than {days} days ago)")
    return 0


def _cmd_erase(args: argparse.Namespace) -> int:
    kind, target = (("record", args.record) if args.record else
                    ("session", args.session) if args.session else ("user", args.user))
    if not args.yes:
        raise _Refused(f"erasing {kind} {target} is irreversible; add --yes to confirm", EXIT_REFUSED)
    with _runtime(args) as rt:
        ops = rt.operations
        erase: dict[str, Callable[[str, str, str], Any]] = {
            "record": ops.erase_record, "session": ops.erase_session, "user": ops.erase_user}
        result = erase[kind](target, args.reason, _actor(args))
    counts = ", ".join(f"{k} {v}" for k, v in sorted(result.counts.items()))
    print(f"erased {kind} {target}: {counts}; event {result.event_id}")
    if not result.compacted:
        print("warning: another connection kept the WAL from being truncated; rerun when the host"
              " is stopped", file=sys.stderr)
    return 0


def _cmd_reembed(args: argparse.Namespace) -> int:
    def bar(done: int, total: int) -> None:
        width = 30
        filled = width if total == 0 else width * done // total
        sys.stderr.write(f"\rreembed [{'#' * filled}{'.' * (width - filled)}] {done}/{total}")
        sys.stderr.flush()

    with _runtime(args, repairs=True) as rt:
        result = rt.operations.reembed(args.model, args.version, dims=args.dims, progress=bar,
                                  actor=_actor(args))
    sys.stderr.write("\n")
    print(f"re-embedded {result.embedded} records with {result.model} version {result.version} "
          f"in {result.seconds:.1f} s ({result.records_per_second:.0f} records/s); "
          f"dropped {result.dropped} old vectors")
    return 0


def _cmd_snapshot(args: argparse.Namespace) -> int:
    if args.action == "save":
        with _runtime(args) as rt:
            result = rt.operations.snapshot_save(args.path)
        print(f"saved {result.records} records ({result.bytes} bytes) to {result.path}")
        return 0
    if not args.yes:
        raise _Refused("snapshot load replaces the store file under any open connection; stop the"
                       " host and add --yes to confirm", EXIT_REFUSED)
    with _runtime(args, existing=False, repairs=True) as rt:
        result = rt.operations.snapshot_load(args.path)
        target = rt.store.path
    print(f"loaded {result.records} records from {result.path} into {target}")
    return 0


def _cmd_grant(args: argparse.Namespace) -> int:
    read = args.read or not args.write
    with _runtime(args, existing=False) as rt:
        rt.host.grant(args.agent, args.scope, read=read, write=args.write, actor=_actor(args))
    print(f"granted {args.agent} on {args.scope}: read={'yes' if read else 'no'}"
          f" write={'yes' if args.write else 'no'}")
    return 0


def _cmd_revoke(args: argparse.Namespace) -> int:
    with _runtime(args) as rt:
        removed = rt.host.revoke(args.agent, args.scope, actor=_actor(args))
    print(f"revoked {args.agent} on {args.scope}" if removed
          else f"{args.agent} had no grant on {args.scope}; nothing changed")
    return 0


def _cmd_review_due(args: argparse.Namespace) -> int:
    from retold.operations import TEMPORAL_REVIEWER

    with _runtime(args) as rt:
        count = rt.operations.review_due(_actor(args, TEMPORAL_REVIEWER))
    print(f"flagged {count} records due for review")
    return 0


def _cmd_extract(args: argparse.Namespace) -> int:
    with _runtime(args) as rt:
        if rt.store.get_session(args.session_id) is None:
            raise _Refused(f"no session {args.session_id}")
        result = rt.extraction.run(args.session_id, force=True)
    if result.outcome == "not_configured":
        raise _Refused(f"extraction is not configured (no hosted model key): {args.session_id}"
                       " stays pending", EXIT_PENDING)
    if result.outcome == "not_ended":
        raise _Refused(f"session {args.session_id} has not ended; extraction runs after it ends")
    if result.outcome in ("failed", "busy", "missing"):
        raise _Refused(f"extraction {result.outcome}: {result.reason or args.session_id}")
    print(f"{args.session_id}: {result.outcome} {json.dumps(result.counts, sort_keys=True)}")
    return 0


def _cmd_mcp(args: argparse.Namespace) -> int:
    if args.http:
        if args.agent or args.user or args.project:
            raise _Refused("--agent, --user and --project are for stdio; over --http each token in"
                           " mcp.tokens names its principal", EXIT_USAGE)
        host, port = _host_port(args.http)
        if not _config(args).mcp.tokens:
            raise _Refused("--http needs at least one token in mcp.tokens of --config; anonymous"
                           " access is never served", EXIT_USAGE)
    elif not (args.agent and args.user):
        raise _Refused("stdio needs --agent and --user (or use --http with mcp.tokens)", EXIT_USAGE)
    try:
        from retold import mcp_server
    except ModuleNotFoundError as exc:
        if not (exc.name or "").startswith(("mcp", "uvicorn", "starlette")):
            raise
        raise _Refused("the MCP SDK is not installed; pip install 'retold[mcp]'", EXIT_USAGE) from None
    with _runtime(args) as rt:
        if args.http:
            mcp_server.serve_http(rt, host, port)
        else:
            mcp_server.serve_stdio(rt, args.agent, args.user, args.project)
    return 0


def _host_port(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise _Refused(f"--http expects HOST:PORT, e.g. 127.0.0.1:8765, got {text!r}", EXIT_USAGE)
    return host, int(port)


# -- the parser ----------------------------------------------------------------------------------


def _command(
    commands: Any, name: str, run: Callable[[argparse.Namespace], int], help_text: str, description: str
) -> argparse.ArgumentParser:
    sub: argparse.ArgumentParser = commands.add_parser(name, help=help_text, description=description)
    _common(sub)
    sub.set_defaults(run=run)
    return sub


def build_parser() -> argparse.ArgumentParser:
    """The full parser; every command has help and description text (checked by a test)."""
    parser = _Parser(
        prog="retold", description="Retold: durable, scoped, evidence-backed memory for AI agents."
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    migrate = _command(commands, "migrate", _cmd_migrate, "apply pending schema migrations to the store",
                       "Apply forward-only schema migrations, print the embedding family the store's"
                       " vectors belong to, and list legacy records a migration could not map; exit 2"
                       " while any remain.")
    migrate.add_argument("--expire-unmapped", action="store_true",
                         help="retire every unmapped legacy record (status expired, one event each)")
    migrate.add_argument("--allow-unmapped", action="store_true",
                         help="acknowledge unmapped legacy records and exit 0")
    _command(commands, "demo", _cmd_demo, "run the end-to-end demo on a fresh store",
             "Play the two-session Acme North story on a fresh store (default .demo/): an explicit"
             " memory_write, then each session's extraction by a Celery worker subprocess on the"
             " embedded broker (in this process if the workers package is missing), replaying"
             " recorded model output when ANTHROPIC_API_KEY is unset; then print the current billing"
             " contact with its explanation, the superseded record, the session summaries and the"
             " event trail. No API key, Redis or model hub needed.")

    search = _command(commands, "search", _cmd_search, "run retrieval and print the search_log row",
                      "Search as an agent for a user, print the rendered results and the logged row.")
    search.add_argument("--agent", required=True, help="agent id of the searching principal")
    search.add_argument("--user", required=True, help="user id of the searching principal")
    search.add_argument("--project", help="project id of the principal, if any")
    search.add_argument("--k", type=_positive, help="how many results (default: retrieval.default_k)")
    search.add_argument("--json", action="store_true", help="print one JSON object")
    search.add_argument("query", nargs="+", metavar="QUERY", help="the query (words are joined)")

    get = _command(commands, "get", _cmd_get, "print a full record with lineage and events",
                   "Print one record, whatever its status, with its supersession lineage, conflicts"
                   " and audit events, as JSON.")
    get.add_argument("id", help="record id")

    dump = _command(commands, "dump", _cmd_dump, "print the active records of one scope",
                    "Print the provisional and confirmed records of one scope, oldest first.")
    dump.add_argument("--scope", required=True, type=_scope, help="scope as kind:id, e.g. user:aditya")
    dump.add_argument("--json", action="store_true", help="one JSON object per line")

    _command(commands, "expire", _cmd_expire, "expire every active record past its expiry",
             "Mark every active record whose expires_at has passed as expired, one record.status"
             " event each.")
    _command(commands, "retain", _cmd_retain, "blank old transcripts of extracted sessions",
             "Blank the turns of sessions whose extraction completed and that ended more than"
             " sessions.retain_days ago; turn rows stay. Unextracted sessions are never blanked.")

    erase = _command(commands, "erase", _cmd_erase, "irreversibly erase a record, session or user",
                     "Irreversibly erase durable content, keep ids, kinds and timestamps,"
                     " then compact the file so no residue remains. Needs --yes.")
    target = erase.add_mutually_exclusive_group(required=True)
    target.add_argument("--record", help="erase one record (tombstone kept)")
    target.add_argument("--session", help="blank one session's transcript (turn rows kept)")
    target.add_argument("--user", help="erase every place a user's text can reach")
    erase.add_argument("--reason", required=True, help="why; recorded on the audit event")
    erase.add_argument("--yes", action="store_true", help="confirm the irreversible erase")

    reembed = _command(commands, "reembed", _cmd_reembed, "re-embed every record with another model",
                       "Re-embed every record with text, drop the old vectors and log one"
                       " store.reembedded event, and record the new embedding family as the store's."
                       " A new version of the same model is accepted; another model is refused while"
                       " the dense floors are still those of the old one.")
    reembed.add_argument("--model", required=True, help="embedding model name or path ('fake' for tests)")
    reembed.add_argument("--version", required=True, help="embedding version tag for the new vectors")
    reembed.add_argument("--dims", type=_positive, help="vector width (default: embedding.dims)")

    snapshot = _command(commands, "snapshot", _cmd_snapshot, "save or load a copy of the store",
                        "Copy the SQLite database to a new file, or replace the store with a copy"
                        " (load needs --yes and a stopped host).")
    snapshot.add_argument("action", choices=["save", "load"], help="save the store, or load a snapshot")
    snapshot.add_argument("path", help="snapshot file")
    snapshot.add_argument("--yes", action="store_true", help="confirm replacing the store (load)")

    grant = _command(commands, "grant", _cmd_grant, "create or update a scope grant",
                     "Give an agent read and/or write access to a shared scope (read only when no"
                     " flag is given).")
    grant.add_argument("agent", help="agent id")
    grant.add_argument("scope", type=_scope, help="scope as kind:id")
    grant.add_argument("--read", action="store_true", help="allow reading the scope")
    grant.add_argument("--write", action="store_true", help="allow writing the scope")

    revoke = _command(commands, "revoke", _cmd_revoke, "remove a scope grant",
                      "Remove an agent's grant on a scope.")
    revoke.add_argument("agent", help="agent id")
    revoke.add_argument("scope", type=_scope, help="scope as kind:id")

    _command(commands, "review-due", _cmd_review_due, "flag one batch of records due for review",
             "Atomically flag at most ingestion.temporal_review_batch_size records whose review_at"
             " has arrived, one record.review_due event each.")
    extract = _command(commands, "extract", _cmd_extract, "run extraction for one session in-process",
                       "Run extraction, review and apply for one ended session in this process, again"
                       " if it already ran (a re-run reuses the stored stage outputs). Exits 3 when no"
                       " hosted model is configured: the session then stays pending.")
    extract.add_argument("session_id", help="session id")

    mcp = _command(commands, "mcp", _cmd_mcp, "serve the memory tools to MCP clients",
                   "Serve the five memory tools over the Model Context Protocol: over stdio for the"
                   " principal given by --agent/--user/--project (one session per server process),"
                   " or over streamable HTTP at http://HOST:PORT/mcp where every request needs a bearer"
                   " token listed (as its SHA-256) in mcp.tokens. Needs the mcp extra.")
    mcp.add_argument("--agent", help="agent id of the principal (stdio)")
    mcp.add_argument("--user", help="user id of the principal (stdio)")
    mcp.add_argument("--project", help="project id of the principal, if any (stdio)")
    mcp.add_argument("--http", metavar="HOST:PORT",
                     help="serve streamable HTTP instead of stdio; principals come from mcp.tokens")
    register_profile_commands(commands, _common, _runtime)
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
    except _Refused as exc:
        print(f"retold {args.command}: {exc}", file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        print(f"retold {args.command}: interrupted", file=sys.stderr)
        return 130
    except (RetoldError, OSError, sqlite3.Error, ValueError) as exc:  # see retold.cli_failure
        return report_failure(args.command, exc, verbose=args.verbose)


if __name__ == "__main__":
    raise SystemExit(main())
