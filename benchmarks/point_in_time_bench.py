"""Point-in-time questions: what held then, on the labelled conversational set and the demo.

Each conversation of benchmarks/data/conversations.json is written as the retrieval
benchmark writes it (``benchmarks.retrieval_bench.load_conversation``: session order,
each record's event time its session's date), so later values supersede earlier ones and
supersession ends their validity windows. Every ``update`` question (a fact that changed,
with its current record and the stale ones it replaced) is then asked four ways through
the real retriever, k = 10:

* current value: no ``as_of``; right when the current record ranks first;
* past value by month: ``as_of`` the 15th of a month inside a stale record's window
  (else the window's middle); right when that stale record ranks first;
* past value by explicit date: ``as_of`` noon the day after the stale record was said;
  right when it ranks first;
* value never held: ``as_of`` the day before the first value was said; right when no
  record of the fact ranks first.

Besides answer@1 it reports the right value of the fact: whether the first of the fact's
records in the results is the expected one (none of them for a value never held), which
separates the time a search answers for from how well the question finds its fact at all
(the ``current`` rows show that part, as retrieval.md's current@1 does).

The demo's story (Dana Reyes from 10 January, Marcus Chen from 1 March 2026) is asked the
same four ways. The dates a question names are not read here: every question passes its
time as ``as_of``.

Run: ``.venv/bin/python -m benchmarks.point_in_time_bench [--conversations N]
[--no-report]``; writes benchmarks/results/point_in_time.json and .md.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from benchmarks.report import machine, write_report
from benchmarks.retrieval_bench import AGENT, DATA, K, _parse_date, calibration_overrides, load_conversation
from retold import build_runtime, load_config
from retold.ingest.equivalence import ExactJudge
from retold.ingest.ingestor import WriteRequest
from retold.models import EntityMention, Principal, Scope, SearchRequest

KINDS = ("current", "past_by_month", "past_by_date", "never_held")


@dataclass(frozen=True)
class Asked:
    """One point-in-time question and whether the top result was the right one."""

    source: str  # "conversations" or "demo"
    kind: str
    text: str
    as_of: str | None
    expected: str | None  # the record key that should rank first; None: none of ``chain``
    top: str | None
    right: bool
    fact_right: bool  # the first of the fact's records returned is the expected one


def _month_inside(start: datetime, end: datetime) -> datetime:
    """The 15th of a month inside ``[start, end)``, else the window's middle."""
    moment = start.replace(day=15, hour=12, minute=0, second=0, microsecond=0)
    while moment < start:
        moment = (moment.replace(day=1) + timedelta(days=32)).replace(day=15)
    return moment if moment < end else start + (end - start) / 2


def _ask(rt: Any, principal: Principal, ids: dict[str, str], text: str,
         as_of: datetime | None) -> list[str]:
    outcome = rt.retriever.search(principal, SearchRequest(queries=[text], k=K, as_of=as_of))
    return [ids.get(r.record.id, r.record.id) for r in outcome.response.results]


def _four_ways(rt: Any, principal: Principal, ids: dict[str, str], source: str, text: str,
               chain: list[tuple[str, datetime]]) -> list[Asked]:
    """``chain``: the fact's records oldest first, with when each started; the last holds now."""
    out: list[Asked] = []

    def put(kind: str, as_of: datetime | None, expected: str | None) -> None:
        keys = _ask(rt, principal, ids, text, as_of)
        top = keys[0] if keys else None
        fact = next((key for key in keys if key in {k for k, _ in chain}), None)
        right = top == expected if expected is not None else top != fact or top is None
        shown = None if as_of is None else as_of.isoformat()
        out.append(Asked(source, kind, text, shown, expected, top, right, fact == expected))

    put("current", None, chain[-1][0])
    for (key, start), (_, end) in zip(chain, chain[1:], strict=False):
        put("past_by_month", _month_inside(start, end), key)
        put("past_by_date", start + timedelta(days=1), key)
    put("never_held", chain[0][1] - timedelta(days=1), None)
    return out


def _conversation(rt: Any, conv: dict[str, Any]) -> list[Asked]:
    ids = load_conversation(rt, conv)
    started = {r["key"]: _parse_date(r["date"]) for r in conv["records"]}
    principal = Principal(AGENT, conv["user"], None, None)
    out: list[Asked] = []
    for question in conv["questions"]:
        if question["kind"] != "update" or not question.get("stale"):
            continue
        chain = sorted(((key, started[key]) for key in [*question["stale"], question["current"]]),
                       key=lambda pair: pair[1])
        out += _four_ways(rt, principal, ids, "conversations", question["text"], chain)
    return out


def _demo(rt: Any) -> list[Asked]:
    """The demo's billing contacts, written as its explicit write and recording write them."""
    user = "am-jordan"
    rt.host.grant(AGENT, Scope("user", user), read=True, write=True)
    rt.host.provision_user(user, aliases=["Jordan"])
    principal = Principal(AGENT, user, None, None)
    about = (EntityMention("org", "Acme North", "about"),)
    ids: dict[str, str] = {}
    dana_from, marcus_from = datetime(2026, 1, 10, tzinfo=UTC), datetime(2026, 3, 1, tzinfo=UTC)
    # Dana said on 10 January; Marcus said later, dated from 1 March (when Dana left).
    for key, name, event_at, valid_from in (("dana", "Dana Reyes", dana_from, None),
                                            ("marcus", "Marcus Chen", None, marcus_from)):
        result = rt.ingestor.write(principal, WriteRequest(
            type="semantic", content=f"Billing contact for Acme North is {name}.",
            attribute="billing_contact", target=Scope("user", user), source_kind="system",
            event_at=event_at, valid_from=valid_from,
            entities=(*about, EntityMention("person", name, "mentions"))), origin="host")
        if not result.ok or result.record_id is None:
            raise SystemExit(f"demo {key}: {result.outcome} {result.note}")
        ids[result.record_id] = key
    return _four_ways(rt, principal, ids, "demo", "Who is the billing contact for Acme North?",
                      [("dana", dana_from), ("marcus", marcus_from)])


def _rate(asked: list[Asked], fact: bool = False) -> float | None:
    if not asked:
        return None
    return round(sum(a.fact_right if fact else a.right for a in asked) / len(asked), 4)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--conversations", type=int, default=None, help="only the first N")
    parser.add_argument("--no-report", action="store_true", help="do not write benchmarks/results")
    args = parser.parse_args()
    conversations = json.loads(DATA.read_text())["conversations"][: args.conversations]
    with tempfile.TemporaryDirectory() as tmp:
        store = {"path": str(Path(tmp) / "memory.sqlite")}
        config = load_config(overrides=calibration_overrides(store, None))
        with build_runtime(config, judge=ExactJudge()) as rt:
            asked = [a for conv in conversations for a in _conversation(rt, conv)] + _demo(rt)
            embedding = {"model": rt.embedder.name, "version": rt.embedder.version}
    rows = [["source", "kind", "n", "answer@1", "right value of the fact"]]
    figures: dict[str, Any] = {}
    for source in ("conversations", "demo", "all"):
        for kind in (*KINDS, "as_of"):
            subset = [a for a in asked if source in ("all", a.source)
                      and (a.kind == kind or (kind == "as_of" and a.kind != "current"))]
            figures.setdefault(source, {})[kind] = {"n": len(subset), "answer_at_1": _rate(subset),
                                                    "fact_right": _rate(subset, fact=True)}
            rows.append([source, kind, str(len(subset)), str(_rate(subset)), str(_rate(subset, fact=True))])
    for row in rows:
        print(" | ".join(row))
    if not args.no_report:
        report = {"machine": machine(), "k": K, "conversations": len(conversations), "embedding": embedding,
                  "questions": len(asked), "figures": figures,
                  "wrong": [vars(a) for a in asked if not a.right]}
        write_report("point_in_time", report, rows, notes=(
            f"{len(asked)} questions: the update questions of {len(conversations)} conversations and the "
            "demo's billing contact, each asked for the current value (no as_of), a past value by "
            "month and by explicit date (as_of inside a superseded record's window) and before any "
            "value was said (right when none of the fact's records ranks first); `as_of` is every "
            "kind but current. k = 10. Command: `python -m benchmarks.point_in_time_bench`."))


if __name__ == "__main__":
    main()
