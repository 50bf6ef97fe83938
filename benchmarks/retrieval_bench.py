"""Retrieval quality on the labelled conversational set, against a hybrid baseline.

Loads benchmarks/data/conversations.json (built by ``benchmarks.conversations``): each
conversation becomes one user's memory, written through the real write path in session
order (so later billing contacts and plans supersede earlier ones) with the configured
embedder (MiniLM on ONNX by default) and the exact judge. Every question is then asked
through the real retriever with the shipped defaults, k = 10.

The baseline runs in the same process on the same vectors: dense cosine over every fact
the conversation ever stated (superseded ones included, as a plain index keeps them),
BM25 from an SQLite FTS5 table with the porter stemmer, and their reciprocal rank fusion
(k = 60, top 30 of each). Dense-only and BM25-only figures come from the same lists.

Reported per question kind and per half (even conversations = half A, odd = half B: the
gate is fitted on A and checked on B), and for the questions of
benchmarks/data/unseen_wordings.json (``benchmarks.unseen_wordings``: the same records
asked in wordings no fit has seen, so a gate that fits the set's own phrasing shows):
R@1/5/10 (share of the expected records found in the top k, averaged), abstention
(unanswerable questions that return nothing), right-at-1 on each unanswerable question's
answerable twin, current value at rank 1 and stale results on questions about facts that
changed, results and tokens per search.

Run: ``.venv/bin/python -m benchmarks.retrieval_bench [--conversations N] [--dump PATH]
[--store URL] [--redact-pattern REGEX]``; ``--dump`` also writes every logged search row with its question, to
decide again offline with ``retold.retrieve.replay.replay`` (``benchmarks.fit_gate``
reads it). Writes
benchmarks/results/retrieval.json and retrieval.md. ``--store`` runs the same questions on
an empty PostgreSQL database instead of a fresh SQLite file and writes
retrieval_postgres.json and .md, so the two lexical channels (FTS5 and ``tsvector``) can be
compared under the same gate.

``--redact-pattern REGEX`` (repeatable) measures what redaction costs search instead: the
same questions are asked on the raw records and, for each REGEX, under a memory pack whose
``pii`` class is REGEX and is redacted before embedding (so the dense and lexical channels
see the records with what REGEX matches masked), and benchmarks/results/redaction.json and
.md report the recall of both, over every answerable question and over those whose
expected records the pattern masks. The unseen wordings are not asked in this mode.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from benchmarks.report import machine, pin_threads, report_name, write_report  # noqa: E402

pin_threads()

import numpy as np  # noqa: E402

from benchmarks.baselines import Hybrid  # noqa: E402
from retold import build_runtime, load_config  # noqa: E402
from retold.ingest.equivalence import ExactJudge  # noqa: E402
from retold.ingest.ingestor import WriteRequest  # noqa: E402
from retold.models import EntityMention, Principal, Scope, SearchRequest  # noqa: E402
from retold.plain import to_plain  # noqa: E402
from retold.retrieve.budget import record_tokens  # noqa: E402

DATA = Path(__file__).resolve().parent / "data" / "conversations.json"
UNSEEN = DATA.parent / "unseen_wordings.json"
AGENT = "bench-agent"
K = 10
ANSWERABLE_KINDS = (
    "single_hop",
    "multi_hop",
    "temporal",
    "open_domain",
    "wrong_speaker",
    "one_word",
    "two_word",
    "identifier",
    "numbered_name",
    "update",
)
UNANSWERABLE_KINDS = (
    "unanswerable_person",
    "unanswerable_account",
    "unanswerable_project",
    "unanswerable_attribute",
)
SYSTEMS = ("retold", "rrf", "dense", "bm25")


@dataclass
class Outcome:
    """One question's ranked answer from one system (record keys, best first)."""

    keys: list[str]
    tokens: int = 0


@dataclass
class Question:
    conv: int
    key: str
    kind: str
    text: str
    expected: list[str]
    twin: str | None
    current: str | None
    stale: list[str]
    numbered: bool
    unseen: bool = False  # worded anew (unseen_wordings.json), never tuned on
    outcomes: dict[str, Outcome] = field(default_factory=dict)
    search_id: str | None = None


def _parse_date(value: str) -> datetime:
    return datetime.fromisoformat(value).replace(hour=12, tzinfo=UTC)


def load_conversation(rt: Any, conv: dict[str, Any]) -> dict[str, str]:
    """Write one conversation's records in session order; return record id -> key."""
    user = conv["user"]
    rt.host.grant(AGENT, Scope("user", user), read=True, write=True)
    rt.host.provision_user(user, aliases=[conv["speakers"][0]])
    principal = Principal(AGENT, user, None, None)
    ids: dict[str, str] = {}
    for rec in sorted(conv["records"], key=lambda r: (r["session"], r["key"])):
        mentions = [EntityMention(kind, name, "mentions") for kind, name in rec["mentions"]]
        mentions.insert(0, EntityMention(rec["about"][0], rec["about"][1], "about"))
        result = rt.ingestor.write(
            principal,
            WriteRequest(
                type=rec["type"],
                content=rec["content"],
                attribute=rec["attribute"],
                target=Scope("user", user),
                source_kind="system",
                event_at=_parse_date(rec["date"]),
                entities=tuple(mentions),
            ),
            origin="host",
        )
        if not result.ok or result.record_id is None:
            raise SystemExit(f"{rec['key']}: {result.outcome} {result.note}")
        ids[result.record_id] = rec["key"]
    return ids


def baseline(embedder: Any, records: Sequence[dict[str, Any]]) -> Hybrid:
    """Dense + BM25 (porter) + RRF over one conversation's facts, all of them."""
    return Hybrid(embedder, [r["key"] for r in records], [r["content"] for r in records])


def recall_at(outcome: Outcome, expected: Iterable[str], k: int) -> float:
    wanted = set(expected)
    return len(wanted & set(outcome.keys[:k])) / len(wanted)


def _mean(values: list[float]) -> float | None:
    return round(float(np.mean(values)), 4) if values else None


def score(questions: list[Question], system: str) -> dict[str, Any]:
    """Every figure of one system over a set of questions."""
    by_key = {q.key: q for q in questions}
    out: dict[str, Any] = {"kinds": {}}
    answerable = [q for q in questions if q.expected]
    for kind in ANSWERABLE_KINDS:
        qs = [q for q in answerable if q.kind == kind]
        if qs:
            out["kinds"][kind] = {
                f"r@{k}": _mean([recall_at(q.outcomes[system], q.expected, k) for q in qs])
                for k in (1, 5, 10)
            } | {"n": len(qs)}
    out["answerable"] = {
        f"r@{k}": _mean([recall_at(q.outcomes[system], q.expected, k) for q in answerable])
        for k in (1, 5, 10)
    } | {"n": len(answerable)}
    unanswerable = [q for q in questions if not q.expected]
    abstain: dict[str, Any] = {}
    for kind in UNANSWERABLE_KINDS:
        qs = [q for q in unanswerable if q.kind == kind]
        if qs:
            abstain[kind] = {
                "abstained": _mean([float(not q.outcomes[system].keys) for q in qs]),
                "n": len(qs),
            }
    abstain["all"] = {
        "abstained": _mean([float(not q.outcomes[system].keys) for q in unanswerable]),
        "n": len(unanswerable),
    }
    twins = [by_key[q.twin] for q in unanswerable if q.twin in by_key]
    abstain["twin_right_at_1"] = _mean(
        [
            float(bool(t.outcomes[system].keys) and t.outcomes[system].keys[0] in t.expected)
            for t in twins
        ]
    )
    abstain["twin_answered"] = _mean([float(bool(t.outcomes[system].keys)) for t in twins])
    out["abstention"] = abstain
    changed = [q for q in questions if q.current is not None and q.stale]
    for label, qs in (
        ("all", changed),
        ("numbered", [q for q in changed if q.numbered]),
        ("plain", [q for q in changed if not q.numbered]),
    ):
        out.setdefault("current", {})[label] = {
            "current_at_1": _mean(
                [
                    float(bool(q.outcomes[system].keys) and q.outcomes[system].keys[0] == q.current)
                    for q in qs
                ]
            ),
            "stale_returned": _mean(
                [float(bool(set(q.stale) & set(q.outcomes[system].keys))) for q in qs]
            ),
            "n": len(qs),
        }
    out["results_per_search"] = _mean([float(len(q.outcomes[system].keys)) for q in questions])
    out["tokens_per_search"] = _mean([float(q.outcomes[system].tokens) for q in questions])
    return out


def unseen_questions(count: int) -> list[list[dict[str, Any]]]:
    """The unseen-wordings questions of the first ``count`` conversations, in their order."""
    return [conv["questions"] for conv in json.loads(UNSEEN.read_text())["conversations"][:count]]


def calibration_overrides(store: dict[str, str], embedding: dict[str, object] | None
                          ) -> dict[str, Any]:
    """Overrides for a run on ``store`` with ``embedding`` changed. A run under another
    model is a fitting run for it: its gate is what the fit replaces, so the runtime is
    told the gate belongs to that model."""
    overrides: dict[str, Any] = {"store": store, "embedding": {"torch_threads": 1, **(embedding or {})}}
    if embedding and "model" in embedding:
        overrides["retrieval"] = {"gate": {"calibrated_for": embedding["model"]}}
    return overrides


def run(
    conversations: list[dict[str, Any]],
    store: Path | str,
    embedding: dict[str, object] | None = None,
    unseen: list[list[dict[str, Any]]] | None = None,
    config_file: Path | None = None,
    pack: Path | None = None,
) -> tuple[list[Question], dict[str, Any], Any]:
    """Load and ask every conversation on ``store`` (a SQLite path or a PostgreSQL URL),
    then its ``unseen`` questions when given; the runtime starts from ``config_file`` (None
    = the defaults), ``embedding`` overrides its embedding block and ``pack`` names the
    memory pack file it runs under (None: the built-in pack)."""
    key = "url" if str(store).startswith("postgresql") else "path"
    overrides = calibration_overrides({key: str(store)}, embedding)
    if pack is not None:
        overrides["tenancy"] = {"pack": str(pack)}
    config = load_config(config_file, overrides=overrides)
    rt = build_runtime(config, judge=ExactJudge())
    questions: list[Question] = []
    all_ids: dict[str, str] = {}
    for index, conv in enumerate(conversations):
        started = time.perf_counter()
        ids = load_conversation(rt, conv)
        all_ids.update(ids)
        hybrid = baseline(rt.embedder, conv["records"])
        by_key = {r["key"]: r for r in conv["records"]}
        principal = Principal(AGENT, conv["user"], None, None)
        orgs = {name for name in conv["orgs"] if name.split()[-1].isdigit()}
        asked = [(raw, False) for raw in conv["questions"]]
        asked += [(raw, True) for raw in (unseen[index] if unseen else [])]
        for raw, worded_anew in asked:
            q = Question(
                index,
                raw["key"],
                raw["kind"],
                raw["text"],
                raw["expected"],
                raw.get("twin"),
                raw.get("current"),
                raw.get("stale", []),
                any(name in raw["text"] for name in orgs),
                worded_anew,
            )
            outcome = rt.retriever.search(principal, SearchRequest(queries=[q.text], k=K))
            results = outcome.response.results
            q.outcomes["retold"] = Outcome(
                [ids.get(r.record.id, r.record.id) for r in results],
                sum(record_tokens(r.record) for r in results),
            )
            q.search_id = outcome.response.search_id
            rankings = hybrid.answer(q.text)
            for name, keys in rankings.items():
                top = keys[:K]
                q.outcomes[name] = Outcome(
                    top, sum(len(by_key[k]["content"]) // 4 + 30 for k in top)
                )
            questions.append(q)
        print(
            f"conversation {index}: {len(conv['records'])} records, {len(asked)} questions, "
            f"{time.perf_counter() - started:.1f} s",
            flush=True,
        )
    rt.flush_search_log()
    rows = {row["id"]: row for row in rt.store.search_log_rows()}
    logged = {
        "keys": all_ids,
        "searches": [
            {
                "question": q.key,
                "kind": q.kind,
                "half": "U" if q.unseen else "AB"[q.conv % 2],
                "expected": q.expected,
                "twin": q.twin,
                "current": q.current,
                "stale": q.stale,
                "row": rows.get(q.search_id or ""),
            }
            for q in questions
        ],
    }
    return questions, logged, rt


def _fmt(value: Any) -> str:
    return "-" if value is None else f"{value:.3f}" if isinstance(value, float) else str(value)


def table(report: dict[str, Any]) -> list[list[str]]:
    rows = [["half", "kind", "n", *[f"{s} R@1/5/10" for s in SYSTEMS]]]
    for half in report["halves"]:
        part = report["halves"][half]
        kinds = [*part["retold"]["kinds"], "answerable"]
        for kind in kinds:
            cells = []
            for system in SYSTEMS:
                figs = (
                    part[system]["kinds"].get(kind)
                    if kind != "answerable"
                    else part[system]["answerable"]
                )
                cells.append("/".join(_fmt(figs[f"r@{k}"]) for k in (1, 5, 10)) if figs else "-")
            n = (part["retold"]["kinds"].get(kind) or part["retold"]["answerable"])["n"]
            rows.append([half, kind, str(n), *cells])
        ab = part["retold"]["abstention"]
        for kind, figs in ab.items():
            if isinstance(figs, dict):
                rows.append(
                    [half, f"abstain: {kind}", str(figs["n"]), _fmt(figs["abstained"]), "", "", ""]
                )
        rows.append(
            [
                half,
                "twin right-at-1 / answered",
                "",
                f"{_fmt(ab['twin_right_at_1'])} / {_fmt(ab['twin_answered'])}",
                "",
                "",
                "",
            ]
        )
        for label, figs in part["retold"]["current"].items():
            base = part["rrf"]["current"][label]
            rows.append(
                [
                    half,
                    f"current@1 / stale: {label}",
                    str(figs["n"]),
                    f"{_fmt(figs['current_at_1'])} / {_fmt(figs['stale_returned'])}",
                    f"{_fmt(base['current_at_1'])} / {_fmt(base['stale_returned'])}",
                    "",
                    "",
                ]
            )
        rows.append(
            [
                half,
                "results / tokens per search",
                "",
                *[
                    f"{_fmt(part[s]['results_per_search'])} / {_fmt(part[s]['tokens_per_search'])}"
                    for s in SYSTEMS
                ],
            ]
        )
    return rows


def redaction_pack(pattern: str) -> dict[str, Any]:
    """A pack whose one class, ``pii``, is ``pattern`` and is masked before embedding."""
    return {"default": {"governance": {
        "sensitivity_classes": ["none", {"name": "pii", "decided_by": "pattern", "pattern": pattern}],
        "redact_before_embedding": ["pii"]}}}


def _ask(conversations: list[dict[str, Any]], config_file: Path | None,
         pattern: str | None) -> list[Question]:
    """Every question, on a fresh store under a pack masking ``pattern`` (None: raw)."""
    with tempfile.TemporaryDirectory() as tmp:
        pack = None
        if pattern is not None:
            pack = Path(tmp) / "packs.yaml"
            pack.write_text(yaml.safe_dump(redaction_pack(pattern)))
        questions, _, rt = run(conversations, Path(tmp) / "memory.sqlite", config_file=config_file, pack=pack)
        rt.close()
    return questions


def redaction(conversations: list[dict[str, Any]], patterns: list[str], config_file: Path | None,
              write: bool) -> None:
    """Ask every question on the raw records, then under a pack masking each pattern."""
    raw = _ask(conversations, config_file, None)
    records = sum(len(c["records"]) for c in conversations)
    report: dict[str, Any] = {"machine": machine(), "k": K, "conversations": len(conversations),
                              "records": records, "config": str(config_file or "defaults"), "patterns": []}
    rows = [["pattern", "questions", "kind", "n", "raw R@1/5/10", "redacted R@1/5/10"]]
    notes = []
    for number, pattern in enumerate(patterns, start=1):
        compiled = re.compile(pattern)
        masked = {r["key"] for c in conversations for r in c["records"] if compiled.search(r["content"])}
        redacted = _ask(conversations, config_file, pattern)
        scores: dict[str, dict[str, Any]] = {}
        for label, questions in (("raw", raw), ("redacted", redacted)):
            touched = [q for q in questions if set(q.expected) & masked]
            scores[label] = {"all": score(questions, "retold"), "touched": score(touched, "retold")}
        report["patterns"].append({"pattern": pattern, "records_masked": len(masked), "scores": scores})
        notes.append(f"{number}: `{pattern}` masks {len(masked)} of {records} records.")
        for subset, title in (("all", "every answerable"), ("touched", "expected record masked")):
            before, after = scores["raw"][subset], scores["redacted"][subset]
            for kind in [*before["kinds"], "answerable"]:
                a = before["answerable"] if kind == "answerable" else before["kinds"][kind]
                b = after["answerable"] if kind == "answerable" else after["kinds"][kind]
                rows.append([str(number), title, kind, str(a["n"]),
                             "/".join(_fmt(a[f"r@{k}"]) for k in (1, 5, 10)),
                             "/".join(_fmt(b[f"r@{k}"]) for k in (1, 5, 10))])
    for row in rows:
        print(" | ".join(row))
    if write:
        command = " ".join(f"--redact-pattern '{p}'" for p in patterns)
        write_report("redaction", report, rows, notes=" ".join(notes) + (
            f" {len(conversations)} conversations; k = {K}. Raw: the built-in pack; redacted: a pack "
            "whose pii class is the pattern, in redact_before_embedding, so the record vectors and "
            "the word index hold `[pii]` where the pattern matched. `expected record masked`: the "
            "questions whose expected records the pattern changed. Command: `python -m "
            f"benchmarks.retrieval_bench {command}`."))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--conversations", type=int, default=None, help="only the first N")
    parser.add_argument("--dump", type=Path, default=None, help="write logged rows here (JSON)")
    parser.add_argument("--no-report", action="store_true", help="do not write benchmarks/results")
    parser.add_argument("--store", default=None,
                        help="an empty PostgreSQL database URL to run on instead of SQLite")
    parser.add_argument("--config", type=Path, default=None,
                        help="config file the runtime starts from (config.int8.yaml: the int8 encoder "
                             "and its gate); the report is then named after it (retrieval_int8)")
    parser.add_argument("--redact-pattern", action="append", default=None, metavar="REGEX",
                        help="measure recall on raw records and with REGEX redacted before embedding; "
                             "may be repeated (writes redaction.json and .md)")
    args = parser.parse_args()
    data = json.loads(DATA.read_text())
    conversations = data["conversations"][: args.conversations]
    if args.redact_pattern is not None:
        redaction(conversations, args.redact_pattern, args.config, not args.no_report)
        return
    with tempfile.TemporaryDirectory() as tmp:
        questions, logged, rt = run(conversations, args.store or Path(tmp) / "memory.sqlite",
                                    unseen=unseen_questions(len(conversations)), config_file=args.config)
        seen = [q for q in questions if not q.unseen]
        halves = {
            "A": [q for q in seen if q.conv % 2 == 0],
            "B": [q for q in seen if q.conv % 2],
            "all": seen,
            "unseen": [q for q in questions if q.unseen],
        }
        report = {
            "machine": machine(),
            "k": K,
            "records": sum(len(c["records"]) for c in conversations),
            "questions": len(seen),
            "unseen_questions": len(questions) - len(seen),
            "conversations": len(conversations),
            "backend": rt.store.backend,
            "embedding": {"model": rt.embedder.name, "version": rt.embedder.version},
            "config": str(args.config or "defaults"),
            "fusion": to_plain(rt.config.retrieval.fusion),
            "gate": to_plain(rt.config.retrieval.gate),
            "halves": {h: {s: score(qs, s) for s in SYSTEMS} for h, qs in halves.items()},
        }
        rt_model = rt.embedder.name
        rt.close()
    if args.dump is not None:
        args.dump.write_text(json.dumps(logged))
    for row in table(report):
        print(" | ".join(row))
    if not args.no_report:
        postgres = report["backend"] == "postgres"
        write_report(
            report_name("retrieval_postgres" if postgres else "retrieval", args.config),
            report,
            table(report),
            notes=("On PostgreSQL (tsvector lexical channel). " if postgres else "")
            + ("" if args.config is None else f"Config {args.config.name}: {rt_model}. ")
            + f"{report['records']} records, {report['questions']} questions, "
            f"{report['conversations']} conversations; k = {K}. Half A (even conversations) "
            "fits the gate, half B checks it; `unseen` asks the same records in "
            f"{report['unseen_questions']} questions worded anew, which no fit sees. Baselines: dense "
            "cosine, BM25 (porter), RRF of both, over every stated fact.",
        )


if __name__ == "__main__":
    main()
