"""``retold search``, ``get`` and ``dump``: reading memories as an agent or an operator would."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime
from typing import TYPE_CHECKING, Any

from retold.cli.common import (
    RECORD_ID_HELP,
    Refused,
    add_command,
    cli_runtime,
    positive,
    print_json,
    resolve_record_id,
    scope_arg,
)
from retold.plain import to_plain
from retold.tools.validation import ToolError, parse_time

if TYPE_CHECKING:
    from retold.models import Record

__all__ = ["register"]


def _record_json(record: Record) -> dict[str, Any]:
    data: dict[str, Any] = to_plain(record)
    return data


def _maybe_json(value: Any) -> Any:
    if isinstance(value, str) and value[:1] in "[{":
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _moment(text: str) -> datetime:
    """An argparse type: an ISO 8601 date-time, checked as the tools check one."""
    try:
        return parse_time("--as-of", text)
    except ToolError as exc:
        raise argparse.ArgumentTypeError(exc.message) from None


def _cmd_search(args: argparse.Namespace) -> int:
    from retold.models import Principal
    from retold.policy.grants import no_grant_reason, readable_scopes
    from retold.retrieve.explain import short_id

    query = " ".join(args.query).strip()
    with cli_runtime(args) as rt:
        report = rt.operations.search(args.agent, args.user, query, project_id=args.project, k=args.k,
                                      as_of=args.as_of)
        lacking = None
        if not report.outcome.response.results:
            principal = Principal(args.agent, args.user, None, args.project)
            lacking = no_grant_reason(rt.store, principal, readable_scopes(rt.store, principal))
    if lacking and not args.json:
        # The cause is the grant, not the query: its log row would only bury that line.
        raise Refused(f"no memory found: {lacking}")
    response = report.outcome.response
    log = {key: _maybe_json(value) for key, value in report.log.items()}
    if args.json:
        print_json({
            "search_id": response.search_id, "rendered": report.outcome.rendered,
            "empty_reason": response.empty_reason, "timings_ms": response.timings_ms,
            "results": [{"id": r.record.id, "short_id": short_id(r.record.id), "score": r.score,
                         "content": r.record.content,
                         "status": r.record.status, "scope": str(r.record.scope)}
                        for r in response.results],
            "log": log,
        })
        return 0
    print(report.outcome.rendered)
    print(f"\nsearch_log row {response.search_id}:")
    print_json(log)
    return 0


def _cmd_get(args: argparse.Namespace) -> int:
    with cli_runtime(args, models=False) as rt:  # reads what is stored, embeds nothing
        detail = rt.operations.get(resolve_record_id(rt.store, args.id))
    print_json({"record": _record_json(detail.record),
                "lineage": [{"id": r.id, "version": r.version, "status": r.status,
                             "created_at": r.created_at} for r in detail.lineage],
                "conflicts": detail.conflicts, "events": detail.events})
    return 0


def _cmd_dump(args: argparse.Namespace) -> int:
    with cli_runtime(args, models=False) as rt:  # reads what is stored, embeds nothing
        records = rt.operations.dump(args.scope)
    for record in records:
        if args.json:
            print(json.dumps(_record_json(record), ensure_ascii=False))
        else:
            print(f"{record.id}\t{record.status}\t{record.type}\t{record.subject}\t{record.content}")
    if not args.json:
        print(f"{len(records)} active records in {args.scope}", file=sys.stderr)
    return 0


def register(commands: Any) -> None:
    """Add ``search``, ``get`` and ``dump``."""
    search = add_command(commands, "search", _cmd_search, "run retrieval and print the search_log row",
                         "Search as an agent for a user, print the rendered results and the logged row.")
    search.add_argument("--agent", required=True, help="agent id of the searching principal")
    search.add_argument("--user", required=True, help="user id of the searching principal")
    search.add_argument("--project", help="project id of the principal, if any")
    search.add_argument("--k", type=positive, help="how many results (default: retrieval.default_k)")
    search.add_argument("--as-of", type=_moment, metavar="TIME",
                        help="what was valid then, an ISO 8601 date-time (UTC unless it says otherwise)")
    search.add_argument("--json", action="store_true", help="print one JSON object")
    search.add_argument("query", nargs="+", metavar="QUERY", help="the query (words are joined)")

    get = add_command(commands, "get", _cmd_get, "print a full record with lineage and events",
                      "Print one record, whatever its status, with its supersession lineage, conflicts"
                      " and audit events, as JSON.")
    get.add_argument("id", help=RECORD_ID_HELP)

    dump = add_command(commands, "dump", _cmd_dump, "print the active records of one scope",
                       "Print the provisional and confirmed records of one scope, oldest first.")
    dump.add_argument("--scope", required=True, type=scope_arg, help="scope as kind:id, e.g. user:aditya")
    dump.add_argument("--json", action="store_true", help="one JSON object per line")
