"""``retold sessions``, ``events`` and ``metrics``: what the pipeline is doing, read from the
store (and, for queue depths, the broker) without loading a model or changing anything."""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from retold.cli.common import (
    RECORD_ID_HELP,
    SESSION_ID_HELP,
    add_command,
    cli_runtime,
    positive,
    print_json,
    resolve_record_id,
    resolve_session_id,
)
from retold.cli_failure import EXIT_DAMAGED
from retold.clock import from_iso
from retold.plain import to_plain
from retold.store.event_log import EventQuery, LoggedEvent
from retold.store.session_states import SESSION_STATES, SessionQuery, SessionStatus

if TYPE_CHECKING:
    from retold.observability import Metrics
    from retold.quality.audit import AuditSummary

__all__ = ["register"]

_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}
_TEXT_WIDTH = 100  # longest payload or error shown in text; --json prints them whole


def _since(text: str) -> datetime | timedelta:
    """An argparse type: an ISO 8601 time (UTC unless it says otherwise) or an age such as
    ``90s``, ``30m``, ``6h`` or ``7d``, counted back from now when the command runs."""
    if match := re.fullmatch(r"(\d+)\s*([smhd])", text.strip()):
        return timedelta(**{_UNITS[match.group(2)]: int(match.group(1))})
    try:
        return from_iso(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected an ISO 8601 time or an age like 30m, 6h or 7d, got {text!r}") from None


def _moment(value: datetime | timedelta | None, now: datetime) -> datetime | None:
    return now - value if isinstance(value, timedelta) else value


def _short(moment: datetime | None) -> str:
    return "-" if moment is None else moment.strftime("%Y-%m-%d %H:%M:%SZ")


def _clip(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _TEXT_WIDTH else text[: _TEXT_WIDTH - 1] + "…"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """Columns padded to their widest cell; the last column is left ragged."""
    widths = [max(len(str(row[i])) for row in (header, *rows)) for i in range(len(header) - 1)]
    for row in (header, *rows):
        cells = [str(cell).ljust(width) for cell, width in zip(row, widths, strict=False)]
        print("  ".join([*cells, str(row[-1])]).rstrip())


def _listing_flags(parser: argparse.ArgumentParser, noun: str) -> None:
    parser.add_argument("--limit", type=positive, default=50, help=f"most {noun}s shown (default 50)")
    parser.add_argument("--json", action="store_true", help=f"one JSON object per {noun} and line")


def _print_listing(args: argparse.Namespace, noun: str, items: Sequence[Any], header: Sequence[str],
                   row: Callable[[Any], Sequence[str]]) -> None:
    """JSON lines with ``--json``, else a table and the count on stderr."""
    if args.json:
        for item in items:
            print(json.dumps(to_plain(item), ensure_ascii=False, default=str))
        return
    _table(header, [row(item) for item in items])
    plural = "" if len(items) == 1 else "s"
    print(f"{len(items)} {noun}{plural} (newest {args.limit} that match, oldest first)", file=sys.stderr)


def _cmd_sessions(args: argparse.Namespace) -> int:
    states = ("pending", "extracting") if args.pending else tuple(args.state or ())
    query = SessionQuery(states=states, failing=args.failed, user_id=args.user, agent_id=args.agent,
                         limit=args.limit)
    with cli_runtime(args, models=False) as rt:
        lease = timedelta(seconds=rt.config.ingestion.extraction_lease_seconds)
        sessions = rt.store.session_statuses(query, rt.clock.now() - lease)
    _print_listing(args, "session", sessions, ("SESSION", "STATE", "USER", "AGENT", "STARTED", "ENDED",
                                                "EXTRACTED", "ATTEMPTS", "LAST ERROR"), _session_row)
    return 0


def _session_row(s: SessionStatus) -> tuple[str, ...]:
    return (s.id, s.state, s.user_id, s.agent_id, _short(s.started_at), _short(s.ended_at),
            _short(s.extracted_at), str(s.attempts), _clip(s.last_error or "-"))


def _cmd_events(args: argparse.Namespace) -> int:
    with cli_runtime(args, models=False) as rt:
        # A part that names nothing stays as typed: the listing is then honestly empty.
        record = resolve_record_id(rt.store, args.record) if args.record else None
        session = resolve_session_id(rt.store, args.session) if args.session else None
        query = EventQuery(kind=args.kind, since=_moment(args.since, rt.clock.now()),
                           record_id=record, session_id=session, limit=args.limit)
        events = rt.store.find_events(query)
    _print_listing(args, "event", events, ("AT", "KIND", "ACTOR", "RECORD", "PAYLOAD"), _event_row)
    return 0


def _event_row(e: LoggedEvent) -> tuple[str, ...]:
    payload = json.dumps(e.payload, ensure_ascii=False, sort_keys=True, default=str)
    return (_short(e.at), e.kind, e.actor, e.record_id or "-", _clip(payload))


def _cmd_metrics(args: argparse.Namespace) -> int:
    from retold.broker.depth import queue_depths
    from retold.observability import collect_metrics
    from retold.utility.rollback import rollback_breaches, turn_stats

    with cli_runtime(args, models=False) as rt:
        now = rt.clock.now()
        lease = timedelta(seconds=rt.config.ingestion.extraction_lease_seconds)
        queue = None if args.no_queue else queue_depths(rt.config)
        since = _moment(args.since, now)
        metrics = collect_metrics(rt.store, now, lease, since=since, queue=queue)
        if not args.no_hygiene:
            metrics = dataclasses.replace(metrics, hygiene=rt.operations.hygiene_shares())
        turns = turn_stats(rt.store.decision_summaries(since, args.bundle))
        metrics = dataclasses.replace(metrics, turns=turns)
        breaches = rollback_breaches(turns, rt.config.utility.rollback) if args.rollback_check else []
        path = rt.store.path
    if args.json:
        print_json({**dataclasses.asdict(metrics), "rollback": breaches} if args.rollback_check else metrics)
    else:
        for line in _metrics_text(path, metrics):
            print(line)
    for line in breaches:
        print(f"rollback: {line}", file=sys.stderr)
    return EXIT_DAMAGED if breaches else 0


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{name} {n}" for name, n in counts.items() if n) or "none"


def _metrics_text(path: str, m: Metrics) -> list[str]:
    window = f"since {_short(m.since)}" if m.since else "all kept rows"
    searches = m.searches
    rate = "-" if searches.empty_rate is None else f"{100 * searches.empty_rate:.1f}%"
    triggers = ", ".join(f"{name} {c.total}/{c.empty}" for name, c in m.searches_by_trigger.items())
    lag = m.extraction_lag
    lines = [
        f"retold metrics for {path} at {_short(m.at)} ({window})",
        f"writes:      {sum(m.writes.values())} ({_counts(m.writes)})",
        f"searches:    {searches.total}, empty {searches.empty} ({rate})"
        + (f" [total/empty by trigger: {triggers}]" if triggers else ""),
        f"extractions: {_counts(m.extractions)}",
        f"sessions:    {_counts(m.sessions)}",
        "lag:         " + ("no extracted sessions" if not lag.count else
                           f"{lag.count} sessions, p50 {lag.p50_seconds:.1f} s, p95 {lag.p95_seconds:.1f} s,"
                           f" max {lag.max_seconds:.1f} s (session end to extraction)"),
    ]
    lines.append(f"vectors:     {m.vectors_indexed} indexed (what a process serving this tenant holds), "
                 + (f"{m.embeddings_pending} records waiting for the backfill" if m.embeddings_pending
                    else "none pending"))
    worst = sorted(m.hygiene.items(), key=lambda item: (-item[1][0] - item[1][1], item[0]))
    shown = [f"{scope} {100 * dup:.0f}%/{100 * stale:.0f}%"
             for scope, (dup, stale) in worst[:5] if dup or stale]
    lines.append("hygiene:     " + (("duplicate/stale share, worst first: " + ", ".join(shown)
                                     + (f" (of {len(worst)} scopes)" if len(worst) > 5 else ""))
                                    if shown else f"no duplicates or stale records in {len(worst)} scopes"))
    for bundle, t in m.turns.items():
        lines.append(f"turns:       bundle {bundle}: {t.turns} ({_counts(t.dispositions)}), admitted"
                     f" {100 * t.admitted_rate:.0f}%, regenerated {100 * t.regeneration_rate:.0f}%, failed"
                     f" {100 * t.failure_rate:.0f}%, p50/p95 {t.p50_ms:.0f}/{t.p95_ms:.0f} ms,"
                     f" {t.hosted_tokens} hosted tokens")
    if not m.turns:
        lines.append("turns:       no host-issued memory decisions")
    if m.audit is not None:
        lines.append("audit:       " + _audit_text(m.audit))
    queue = m.queue
    if queue is None:
        lines.append("queues:      not asked (--no-queue)")
    elif queue.reachable:
        depths = ", ".join(f"{name} {n}" for name, n in queue.depths.items())
        lines.append(f"queues:      {depths} ({queue.broker})")
    else:
        lines.append(f"queues:      broker unreachable ({queue.broker}): {queue.error}")
    return lines


def _audit_text(a: AuditSummary) -> str:
    """The extraction audit in one line: the three rates, then the open queue."""
    if a.answered:
        shares = ", ".join(f"{name} {100 * (rate or 0):.0f}%" for name, rate in (
            ("true", a.true_rate), ("atomic", a.atomic_rate), ("worth keeping", a.keep_rate)))
        answers = f"{a.answered} answered (sampled in the last {a.window_days} days): {shares}"
    else:
        answers = f"no answers to items sampled in the last {a.window_days} days"
    waiting = ("none waiting" if a.queue_age_seconds is None else
               f"{a.open} waiting, oldest {a.queue_age_seconds / 86400:.1f} days")
    return f"{answers}; {waiting} (`retold audit list`)"


def register(commands: Any) -> None:
    """Add ``sessions``, ``events`` and ``metrics``."""
    sessions = add_command(
        commands, "sessions", _cmd_sessions, "list sessions with their extraction state",
        "List sessions, newest started first up to --limit (printed oldest first), with their state"
        " (open, pending, extracting, extracted, failed, blocked), user, agent, times, extraction attempts"
        " and the last extraction error. Reads only; loads no model.")
    which = sessions.add_mutually_exclusive_group()
    which.add_argument("--pending", action="store_true",
                       help="only ended sessions not yet extracted (pending or extracting)")
    which.add_argument("--failed", action="store_true",
                       help="only sessions whose latest extraction attempt failed, or that are parked or"
                       " blocked")
    which.add_argument("--state", action="append", choices=SESSION_STATES,
                       help="only sessions in this state (repeat for several)")
    for flag, text in (("--user", "only this user's sessions"), ("--agent", "only this agent's sessions")):
        sessions.add_argument(flag, help=text)
    _listing_flags(sessions, "session")

    events = add_command(
        commands, "events", _cmd_events, "list audit events, newest matches last",
        "List audit events (writes, status changes, extraction runs and failures, erasures, grants),"
        " the newest --limit that match, oldest first, with their payload.")
    for flag, text in (
        ("--kind", "one kind (extraction.failed), or a prefix ending in * or . (extraction.*)"),
        ("--record", "only events about this record: " + RECORD_ID_HELP),
        ("--session", "only events whose payload names this session: " + SESSION_ID_HELP),
    ):
        events.add_argument(flag, help=text)
    events.add_argument("--since", type=_since, help="only events at or after this ISO 8601 time, or"
                        " within this age (90s, 30m, 6h, 7d)")
    _listing_flags(events, "event")

    metrics = add_command(
        commands, "metrics", _cmd_metrics, "print write, search, extraction and queue metrics",
        "Print write outcomes, searches and their empty rate, extraction outcomes, session states,"
        " the lag from a session's end to its extraction, the extraction audit's rates and queue age,"
        " and the queue depths when the broker"
        " answers within 2 s (the values a worker exports to Prometheus, metrics.port), and per scope"
        " the share of duplicates and stale provisional records, as `retold hygiene` counts them, and per"
        " bundle the host-issued memory decisions (dispositions, admission, regeneration and failure"
        " rates, latency, hosted tokens).")
    metrics.add_argument("--since", type=_since, help="count only rows at or after this ISO 8601 time,"
                         " or within this age (30m, 6h, 7d); session states are always current")
    metrics.add_argument("--no-queue", action="store_true", help="do not ask the broker for queue depths")
    metrics.add_argument("--no-hygiene", action="store_true",
                         help="skip the per-scope duplicate and stale shares (they compare vectors)")
    metrics.add_argument("--json", action="store_true", help="print one JSON object")
    metrics.add_argument("--bundle", help="count only the turn decisions of this bundle")
    metrics.add_argument("--rollback-check", action="store_true",
                         help="apply utility.rollback's thresholds to the turn decisions; exit 4 and"
                         " name each breach when one is breached")
