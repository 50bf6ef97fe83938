"""``retold reviews`` and ``retold activation``: the review queue of the activation policy
and a person's own activation decisions, on the command line.

Registered by :mod:`retold.cli`, whose parser helpers it receives, so this module holds
only the two commands. Each command builds a runtime and calls
:class:`retold.activation.activator.Activator` or the store's named reads; every decision is
audited there (``review.resolved``, ``record.activation``). A refusal is one line on
stderr and exit 1; a breached backlog limit exits 3.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import timedelta
from typing import TYPE_CHECKING, Any, cast

from retold.cli.common import RECORD_ID_HELP, add_command, cli_runtime, resolve_record_id
from retold.clock import to_iso

if TYPE_CHECKING:
    from retold.activation.activator import Resolution
    from retold.runtime import Runtime

__all__ = ["EXIT_BREACHED", "register"]

EXIT_BREACHED = 3  # reviews backlog: the queue is longer or older than allowed
EXIT_USAGE = 2

def _usage(command: str, message: str) -> int:
    print(f"retold {command}: {message}", file=sys.stderr)
    return EXIT_USAGE


def _reviews(args: argparse.Namespace) -> int:
    if args.action == "resolve":
        missing = [flag for flag, value in (("ID", args.record), ("--as", args.resolution),
                                            ("--resolver", args.resolver)) if not value]
        if missing:
            return _usage("reviews", f"resolve needs {', '.join(missing)}")
    elif args.action == "backlog" and args.max_open is None and args.max_age_days is None:
        return _usage("reviews", "backlog needs --max-open and/or --max-age-days")
    elif args.action == "backlog" and min(args.max_open or 0, args.max_age_days or 0) < 0:
        return _usage("reviews", "--max-open and --max-age-days must be at least 0")
    with cli_runtime(args, models=False) as rt:  # the review queue embeds nothing
        if args.action == "list":
            return _list(rt, args)
        if args.action == "resolve":
            record = resolve_record_id(rt.store, args.record)
            row = rt.activator.resolve(record, cast("Resolution", args.resolution),
                                       resolver=args.resolver, reason=args.reason)
            print(f"resolved {row.record_id} as {args.resolution}: activation {row.activation}")
            return 0
        return _backlog(rt, args)


def _list(rt: Runtime, args: argparse.Namespace) -> int:
    queue = rt.store.review_queue(rt.clock.now(), limit=args.limit)
    for row, record in queue:
        entry = {"id": record.id, "category": row.category, "rule": row.rule, "reason": row.reason,
                 "waiting_since": to_iso(row.review_opened_at) if row.review_opened_at else None,
                 "scope": str(record.scope), "source_kind": record.source_kind, "content": record.content}
        if args.json:
            print(json.dumps(entry, ensure_ascii=False))
        else:
            print(f"{record.id}  {row.category or '-'}  {row.rule}  since {entry['waiting_since']}"
                  f"  {record.scope}  {record.content}")
    if not args.json:
        print(f"{len(queue)} waiting for review")
    return 0


def _backlog(rt: Runtime, args: argparse.Namespace) -> int:
    now = rt.clock.now()
    backlog = rt.store.review_backlog(now)
    age = now - backlog.oldest_opened_at if backlog.oldest_opened_at else timedelta(0)
    days = age.total_seconds() / 86400
    print(f"open reviews: {backlog.open}; oldest waiting {days:.1f} days")
    breached = []
    if args.max_open is not None and backlog.open > args.max_open:
        breached.append(f"{backlog.open} open > --max-open {args.max_open}")
    if args.max_age_days is not None and days > args.max_age_days:
        breached.append(f"oldest {days:.1f} days > --max-age-days {args.max_age_days:g}")
    if breached:
        print(f"retold reviews: backlog breached: {'; '.join(breached)}", file=sys.stderr)
        return EXIT_BREACHED
    return 0


def _activation(args: argparse.Namespace) -> int:
    with cli_runtime(args) as rt:
        row = rt.activator.set_manually(resolve_record_id(rt.store, args.record), args.activation,
                                        resolver=args.resolver, reason=args.reason)
    print(f"record {row.record_id}: {row.activation} ({row.reason})")
    return 0


def register(commands: Any) -> None:
    """Add ``reviews`` and ``activation`` to the ``retold`` parser."""
    # ``reviews resolve --as`` names the decision, as the review queue's users expect, so it
    # takes ``--as`` over from the operator option, which stays as ``--actor`` there.
    reviews = add_command(
        commands, "reviews", _reviews, "list, resolve and watch the activation review queue",
        "The records the activation policy could not decide on its own. 'list' shows them, longest"
        " waiting first; 'resolve ID --as ambient|conditional|reject --resolver R' decides one"
        " (reject forgets the record); 'backlog --max-open N --max-age-days D' exits 3 when the"
        " queue is longer or older than that. Every decision is audited.", conflict_handler="resolve")
    reviews.add_argument("action", choices=["list", "resolve", "backlog"], help="what to do")
    reviews.add_argument("record", nargs="?", metavar="ID", help=RECORD_ID_HELP + " (resolve)")
    reviews.add_argument("--as", dest="resolution", choices=["ambient", "conditional", "reject"],
                         help="the decision (resolve)")
    reviews.add_argument("--actor", dest="actor", help="operator identity (default: admin); the"
                         " resolver is what the review event records")
    reviews.add_argument("--resolver", help="who decides; recorded on the event (resolve)")
    reviews.add_argument("--reason", help="why; recorded on the event (resolve)")
    reviews.add_argument("--limit", type=int, help="show at most this many (list)")
    reviews.add_argument("--json", action="store_true", help="one JSON object per line (list)")
    reviews.add_argument("--max-open", type=int, help="most open reviews allowed (backlog)")
    reviews.add_argument("--max-age-days", type=float,
                         help="longest a review may wait, in days (backlog)")
    activation = add_command(
        commands, "activation", _activation, "set one record's activation by hand",
        "Make one live record ambient (in every session's profile) or conditional (found by search"
        " only). Ambient is refused for what the policy never allows: an inference, a fact not about"
        " the user, a quote not found in the user's own turns, a credential. Audited with a"
        " record.activation event.")
    activation.add_argument("record", metavar="RECORD", help=RECORD_ID_HELP)
    activation.add_argument("activation", choices=["ambient", "conditional"], help="the activation to set")
    activation.add_argument("--resolver", required=True, help="who decides; recorded on the event")
    activation.add_argument("--reason", required=True, help="why; recorded on the event")
