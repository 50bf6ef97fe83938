"""``retold audit``: the extraction audit on the command line.

``list`` shows the sampled records waiting for an answer, ``answer`` records a person's
three answers about one of them, and ``sample`` samples the past week's extraction
writes now, as the weekly beat task does (:mod:`retold.quality.audit`). A refusal is one
line on stderr and exit 1; a usage error exits 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from retold.cli.common import (
    EXIT_USAGE,
    RECORD_ID_HELP,
    Refused,
    actor,
    add_command,
    cli_runtime,
    positive,
    resolve_record_id,
)
from retold.clock import to_iso
from retold.quality.audit import AuditEntry, answer_audit, audit_entries
from retold.store.audit import Verdicts

__all__ = ["register"]

_ANSWERS = ("yes", "no")
_QUESTIONS = (("is_true", "--true"), ("atomic", "--atomic"), ("keep", "--keep"))
_WIDTH = 100  # longest content or quote shown in text; --json prints them whole


def _audit(args: argparse.Namespace) -> int:
    if args.action == "answer":
        missing = ["ID"] if not args.record else []
        missing += [flag for dest, flag in _QUESTIONS if getattr(args, dest) is None]
        if missing:
            raise Refused(f"answer needs {', '.join(missing)}", EXIT_USAGE)
    elif args.record:
        raise Refused(f"{args.action} takes no ID", EXIT_USAGE)
    with cli_runtime(args, models=False) as rt:  # the audit embeds nothing
        if args.action == "sample":
            sample = rt.operations.audit_sample(actor(args))
            rule = (f"review_sample_rate {sample.rate:g}" if sample.rule == "rate"
                    else "20 a week (review_sample_rate is 0)")
            print(f"sampled {len(sample.added)} of {sample.written} records extraction wrote since"
                  f" {to_iso(sample.since)} ({rule})")
            return 0
        if args.action == "answer":
            verdicts = Verdicts(*(getattr(args, dest) == "yes" for dest, _ in _QUESTIONS))
            item = answer_audit(rt.store, resolve_record_id(rt.store, args.record), verdicts, actor(args))
            print(f"answered {item.record_id}: true {args.is_true}, atomic {args.atomic},"
                  f" worth keeping {args.keep} (by {item.answered_by})")
            return 0
        entries = audit_entries(rt.store, answered=None if args.all else False, limit=args.limit)
    for entry in entries:
        print(json.dumps(_plain(entry), ensure_ascii=False) if args.json else _line(entry))
    if not args.json:
        waiting = sum(1 for e in entries if e.item.verdicts is None)
        print(f"{len(entries)} shown, {waiting} waiting for an answer", file=sys.stderr)
    return 0


def _plain(entry: AuditEntry) -> dict[str, Any]:
    item, record, verdicts = entry.item, entry.record, entry.item.verdicts
    return {
        "id": record.id, "scope": str(record.scope), "type": record.type, "status": record.status,
        "content": record.content, "evidence": record.evidence,
        "evidence_turn": None if entry.turn is None else {"turn": entry.turn.turn, "role": entry.turn.role,
                                                          "content": entry.turn.content},
        "session_id": item.session_id, "written_at": to_iso(item.written_at),
        "sampled_at": to_iso(item.sampled_at), "rule": item.rule,
        "answers": None if verdicts is None else {"true": verdicts.true, "atomic": verdicts.atomic,
                                                  "keep": verdicts.keep},
        "answered_by": item.answered_by,
        "answered_at": None if item.answered_at is None else to_iso(item.answered_at),
    }


def _line(entry: AuditEntry) -> str:
    item, verdicts = entry.item, entry.item.verdicts
    answers = ("waiting" if verdicts is None else
               "true {} atomic {} keep {} by {}".format(*("yes" if v else "no" for v in (
                   verdicts.true, verdicts.atomic, verdicts.keep)), item.answered_by))
    quote = entry.turn.content if entry.turn is not None else entry.record.evidence or "-"
    return (f"{item.record_id}  sampled {item.sampled_at:%Y-%m-%d}  {entry.record.scope}  {answers}\n"
            f"    says:     {_clip(entry.record.content)}\n    evidence: {_clip(quote)}")


def _clip(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _WIDTH else text[: _WIDTH - 1] + "…"


def register(commands: Any) -> None:
    """Add ``audit`` to the ``retold`` parser."""
    audit = add_command(
        commands, "audit", _audit, "list, answer and sample the extraction audit",
        "A weekly sample of the records extraction wrote, for a person to judge. 'list' shows the"
        " sampled records waiting for an answer (--all: answered ones too), each with its evidence;"
        " 'answer ID --true yes|no --atomic yes|no --keep yes|no' records whether the record is true,"
        " says one thing, and is worth keeping (answering again replaces the answers; --as names who"
        " answers); 'sample' samples the past week's extraction writes now, as the weekly beat task"
        " does. The rates and the queue's age are in `retold metrics`.")
    audit.add_argument("action", choices=["list", "answer", "sample"], help="what to do")
    audit.add_argument("record", nargs="?", metavar="ID", help=RECORD_ID_HELP + " (answer)")
    for dest, flag in _QUESTIONS:
        question = {"is_true": "what it says is so", "atomic": "it says one thing",
                    "keep": "it is worth keeping as a memory"}[dest]
        audit.add_argument(flag, dest=dest, choices=_ANSWERS, help=f"{question} (answer)")
    audit.add_argument("--all", action="store_true", help="answered items too (list)")
    audit.add_argument("--limit", type=positive, default=50, help="most items shown (list; default 50)")
    audit.add_argument("--json", action="store_true", help="one JSON object per item and line (list)")
