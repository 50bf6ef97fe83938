"""Retrieval on public conversations nothing here was written for: LongMemEval-S.

Reads a development split of LongMemEval-S (Wu et al., ICLR 2025; MIT-licensed): one JSON
object a line, each a question over a haystack of about fifty chat sessions and 500 turns,
with the turns that hold the answer marked. ``--data`` names the file (default: the
``LONGMEMEVAL_DATA`` variable, else ``longmemeval-s-dev.jsonl.gz`` in the ``shared/data``
folder beside the checkout).

Per question, as a new user would use Retold: a fresh store; every session replayed as a
session of its own (the clock at its date), each turn appended to the transcript and then
written through ``memory_write`` as an episodic record dated by its session, with the turn
as evidence (user turns ``user_statement``, assistant turns ``agent_inference``). Turns run
longer than a written memory usually does, so the content and evidence limits are raised
for the run. Then, on a fresh runtime whose clock reads the question's date, the question is
searched once with ``k = 10`` as a tool search, and once more as a host-issued search
(the runtime warmed first: index loaded, encoder run once).

Baselines, in the same process over the same turns and the same vectors: dense cosine,
BM25 (porter) and their RRF (``benchmarks.baselines``), and that RRF list cut to the tool
result's token budget the way Retold fills its own (``rrf_budget``). Reported per question type and
overall: any@1/5/10 (a gold turn among the first k) and all@5/10 (every gold turn),
the share of these answerable questions answered empty, tokens and results per search,
what host-issued searches inject where they answer (turns, and the share holding the
answer), and search p50/p95. For abstention each question is also asked against another question's
haystack that holds none of its answer sessions (a cross-haystack negative): both trigger
modes should come back empty there, host-issued searches above all.

Writing ~500 turns costs ~15-25 s a question here, so the default run takes a fixed sample,
the first ``--per-type`` (6) questions of each type in file order; ``--all`` runs the whole
split. ``--stores DIR`` keeps each question's store there and reuses it on the next run
(the write path is then not timed again); ``--dump PATH`` writes every logged search row
with its labels, which ``benchmarks.fit_gate`` reads.

Run: ``.venv/bin/python -m benchmarks.longmemeval_bench [--all] [--per-type N]
[--stores DIR] [--dump PATH] [--config FILE]``. Writes benchmarks/results/longmemeval.json
and longmemeval.md.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from benchmarks.report import machine, pin_threads, report_name, summarize, write_report  # noqa: E402

pin_threads()

import numpy as np  # noqa: E402

from benchmarks.baselines import Hybrid  # noqa: E402
from retold import build_runtime, load_config  # noqa: E402
from retold.clock import ManualClock  # noqa: E402
from retold.ingest.equivalence import ExactJudge  # noqa: E402
from retold.models import Principal, Scope, SearchRequest  # noqa: E402
from retold.retrieve.budget import record_tokens  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "longmemeval-s-dev.jsonl.gz"
AGENT = "bench-agent"
USER = "bench-user"
K = 10
PER_TYPE = 6
TYPES = ("single-session-user", "single-session-assistant", "single-session-preference",
         "multi-session", "knowledge-update", "temporal-reasoning")
SYSTEMS = ("retold", "rrf", "rrf_budget", "dense", "bm25")
# Turns are whole chat messages, some of them pages long; the limits a tool call normally
# has on one memory's content and evidence would refuse them.
TURN_LIMITS = {"max_content_chars": 100_000, "max_evidence_chars": 100_000}


@dataclass
class Asked:
    """One search of the run and what each system returned (turn-id sets, best first)."""

    question_id: str
    question: str
    qtype: str
    trigger: str
    negative: bool  # asked against another question's haystack
    gold: frozenset[str]
    returned: dict[str, list[frozenset[str]]] = field(default_factory=dict)
    tokens: int = 0
    search_ms: float = 0.0
    search_id: str | None = None


def _when(iso: str) -> datetime:
    return datetime.fromisoformat(iso.replace("Z", "+00:00"))


def data_path() -> Path:
    """Where the split is read from: ``LONGMEMEVAL_DATA``, else the shared data folder."""
    return Path(os.environ.get("LONGMEMEVAL_DATA", DEFAULT_DATA))


def load_questions(path: Path) -> list[dict[str, Any]]:
    with gzip.open(path, "rt") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def sample(questions: list[dict[str, Any]], per_type: int | None) -> list[dict[str, Any]]:
    """The first ``per_type`` questions of each type in file order (all when None)."""
    if per_type is None:
        return questions
    seen: defaultdict[str, int] = defaultdict(int)
    out = []
    for q in questions:
        if seen[q["question_type"]] < per_type:
            seen[q["question_type"]] += 1
            out.append(q)
    return out


def negatives(questions: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """For each question, the next question (cyclically) whose answer sessions its haystack
    does not hold: asked there, it has no answer."""
    out: dict[str, dict[str, Any]] = {}
    for i, q in enumerate(questions):
        held = {s["session_id"] for s in q["sessions"]}
        for step in range(1, len(questions)):
            other = questions[(i + step) % len(questions)]
            if not held & set(_answer_sessions(other)):
                out[q["question_id"]] = other
                break
    return out


def _answer_sessions(q: dict[str, Any]) -> list[str]:
    by_index = {s["index"]: s["session_id"] for s in q["sessions"]}
    return [by_index[t["session"]] for t in q["turns"] if t["has_answer"]]


def _config(store: Path, config_file: Path | None) -> Any:
    return load_config(config_file, overrides={
        "store": {"path": str(store)}, "tools": TURN_LIMITS,
        "queue": {"scheduler": "in_process"}, "embedding": {"torch_threads": 1}})


def write_haystack(q: dict[str, Any], store: Path, config_file: Path | None) -> dict[str, list[str]]:
    """Replay the question's sessions into a new store; return record id -> turn ids (a
    turn repeated word for word reinforces the record its first telling made). A turn the
    write path refuses (one that quotes something like a credential) is left out, as it
    would be for a user, and so is an empty one; the baselines index only the turns
    Retold stored."""
    clock = ManualClock(_when(q["sessions"][0]["date_iso"]))
    rt = build_runtime(_config(store, config_file), judge=ExactJudge(), clock=clock)
    try:
        rt.host.grant(AGENT, Scope("user", USER), read=True, write=True)
        turns: defaultdict[int, list[dict[str, Any]]] = defaultdict(list)
        for turn in q["turns"]:
            turns[turn["session"]].append(turn)
        ids: defaultdict[str, list[str]] = defaultdict(list)
        for session in q["sessions"]:
            clock.set(_when(session["date_iso"]))
            p = Principal(AGENT, USER, f"{q['question_id']}-{session['index']}", None)
            rt.hooks.on_session_start(p)
            for turn in turns[session["index"]]:
                p = rt.hooks.on_turn(p, turn["role"], turn["text"])
                if not turn["text"].strip():
                    continue  # an empty message is part of the transcript, not a memory
                out = rt.tools.call("memory_write", p, {
                    "type": "episodic", "content": turn["text"], "evidence": turn["text"],
                    "source_kind": "user_statement" if turn["role"] == "user" else "agent_inference",
                    "event_at": session["date_iso"]})
                if "error" in out:
                    if out["error"]["code"] != "secret_detected":
                        raise SystemExit(f"{q['question_id']} {turn['id']}: {out['error']}")
                    continue
                ids[out["record_id"]].append(turn["id"])
        return dict(ids)
    finally:
        rt.close()


def _stores(directory: Path | None) -> Iterator[Path]:
    if directory is not None:
        directory.mkdir(parents=True, exist_ok=True)
        yield directory
        return
    with tempfile.TemporaryDirectory() as tmp:
        yield Path(tmp)


def run_question(q: dict[str, Any], negative: dict[str, Any] | None, folder: Path, config_file: Path | None,
                 keep: bool) -> tuple[list[Asked], float | None, dict[str, Any], dict[str, list[str]]]:
    """Write (or reuse) one haystack and ask its question and its negative; returns the
    searches, the write time (None when reused), the logged rows by search id and the
    turns each record holds."""
    store, sidecar = folder / f"{q['question_id']}.sqlite", folder / f"{q['question_id']}.json"
    write_s = None
    if keep and store.exists() and sidecar.exists():
        ids = json.loads(sidecar.read_text())
    else:
        for stale in folder.glob(f"{q['question_id']}.sqlite*"):
            stale.unlink()
        started = time.perf_counter()
        ids = write_haystack(q, store, config_file)
        write_s = time.perf_counter() - started
        sidecar.write_text(json.dumps(ids))
    rt = build_runtime(_config(store, config_file), judge=ExactJudge(),
                       clock=ManualClock(_when(q["question_date_iso"])))
    try:
        # A warm agent: the index loaded and the encoder run once, so search times are a
        # running process's, not its start-up.
        rt.index.load(rt.store)
        rt.embedder.embed_queries(["warm up"])
        principal = Principal(AGENT, USER, None, None)
        turn_text = {t["id"]: t["text"] for t in q["turns"]}
        asks = [(q, False)] + ([(negative, True)] if negative is not None else [])
        searches: list[Asked] = []
        for asked_q, is_negative in asks:
            for trigger in ("tool", "host"):
                a = Asked(asked_q["question_id"], asked_q["question"], asked_q["question_type"], trigger,
                          is_negative, frozenset() if is_negative else frozenset(asked_q["gold"]))
                started = time.perf_counter()
                outcome = rt.retriever.search(principal, SearchRequest(
                    queries=[asked_q["question"]], k=K, trigger=trigger))
                a.search_ms = (time.perf_counter() - started) * 1000
                results = outcome.response.results
                a.returned["retold"] = [frozenset(ids.get(r.record.id, ())) for r in results]
                a.tokens = sum(record_tokens(r.record) for r in results)
                a.search_id = outcome.response.search_id
                searches.append(a)
        record_ids = list(ids)
        vectors, _ = rt.index.rows(record_ids)
        hybrid = Hybrid(rt.embedder, record_ids, [turn_text[ids[r][0]] for r in record_ids], vectors)
        cost = {r.id: record_tokens(r) for r in rt.store.records(record_ids)}
        for a in searches:
            if a.trigger != "tool":
                continue
            text = q["question"] if not a.negative else negative["question"]  # type: ignore[index]
            rankings = hybrid.answer(text)
            for name, ranked in rankings.items():
                a.returned[name] = [frozenset(ids[r]) for r in ranked[:K]]
            budgeted = within_budget(rankings["rrf"], cost, rt.config.retrieval.token_budget)
            a.returned["rrf_budget"] = [frozenset(ids[r]) for r in budgeted]
        rt.flush_search_log()
        rows = {row["id"]: row for row in rt.store.search_log_rows()}
        return searches, write_s, rows, ids
    finally:
        rt.close()


def within_budget(ranked: list[str], cost: dict[str, int], budget: int) -> list[str]:
    """The first ``K`` of a ranking that fit ``budget`` tokens, a record that does not fit
    skipped and the next one tried, as Retold fills its tool result: the baseline given
    the same room as Retold's answer."""
    kept: list[str] = []
    used = 0
    for record_id in ranked:
        if len(kept) == K:
            break
        if used + cost[record_id] <= budget:
            kept.append(record_id)
            used += cost[record_id]
    return kept


def _any(a: Asked, system: str, k: int) -> float:
    return float(any(turns & a.gold for turns in a.returned[system][:k]))


def _all(a: Asked, system: str, k: int) -> float:
    found = frozenset().union(*a.returned[system][:k]) if a.returned[system] else frozenset()
    return float(a.gold <= found)


def first_gold(a: Asked, system: str) -> int | None:
    """The 1-based rank of the first result holding a gold turn; None when none does."""
    return next((rank for rank, turns in enumerate(a.returned[system], 1) if turns & a.gold), None)


def per_question(searches: list[Asked]) -> dict[str, dict[str, Any]]:
    """Each answerable question's first gold rank by system (tool searches), so two runs can
    be compared question by question instead of only by their means."""
    return {a.question_id: {"type": a.qtype, **{s: first_gold(a, s) for s in SYSTEMS},
                            "returned": len(a.returned["retold"])}
            for a in searches if a.trigger == "tool" and not a.negative}


def _mean(values: list[float]) -> float | None:
    return round(float(np.mean(values)), 4) if values else None


def score(searches: list[Asked]) -> dict[str, Any]:
    """Every figure, per type and overall."""
    answerable = [a for a in searches if not a.negative]
    out: dict[str, Any] = {"types": {}}
    for label, group in [(t, [a for a in answerable if a.qtype == t]) for t in TYPES] + [("all", answerable)]:
        tool = [a for a in group if a.trigger == "tool"]
        if not tool:
            continue
        figs: dict[str, Any] = {"n": len(tool)}
        for system in SYSTEMS:
            figs[system] = {f"any@{k}": _mean([_any(a, system, k) for a in tool]) for k in (1, 5, 10)}
            figs[system] |= {f"all@{k}": _mean([_all(a, system, k) for a in tool]) for k in (5, 10)}
        figs["answered_empty"] = _mean([float(not a.returned["retold"]) for a in tool])
        host = [a for a in group if a.trigger == "host"]
        answered = [a for a in host if a.returned["retold"]]
        figs["host"] = {"answered": _mean([float(bool(a.returned["retold"])) for a in host]),
                        "right_at_1_where_answered": _mean([_any(a, "retold", 1) for a in answered])}
        out["types"][label] = figs
    tool = [a for a in answerable if a.trigger == "tool"]
    out["results_per_search"] = _mean([float(len(a.returned["retold"])) for a in tool])
    out["tokens_per_search"] = _mean([float(a.tokens) for a in tool])
    out["search_ms"] = summarize([a.search_ms for a in tool])
    # What a host-issued search puts in the prompt where it answers: how many turns, and
    # the share of them that hold the answer.
    hosted = [a for a in answerable if a.trigger == "host" and a.returned["retold"]]
    out["host_injected"] = {
        "records": _mean([float(len(a.returned["retold"])) for a in hosted]),
        "answering_share": _mean([float(np.mean([bool(turns & a.gold) for turns in a.returned["retold"]]))
                                  for a in hosted])}
    negs = [a for a in searches if a.negative]
    out["negatives"] = {trigger: {"abstained": _mean([float(not a.returned["retold"])
                                                     for a in negs if a.trigger == trigger]),
                                  "n": sum(a.trigger == trigger for a in negs)}
                        for trigger in ("tool", "host")}
    return out


def _fmt(value: Any) -> str:
    return "-" if value is None else f"{value:.3f}" if isinstance(value, float) else str(value)


def table(report: dict[str, Any]) -> list[list[str]]:
    rows = [["type", "n", *[f"{s} any@1/5/10 · all@5/10" for s in SYSTEMS], "answered empty",
             "host answered / right@1"]]
    for label, figs in report["scores"]["types"].items():
        cells = [f"{'/'.join(_fmt(figs[s][f'any@{k}']) for k in (1, 5, 10))} · "
                 f"{'/'.join(_fmt(figs[s][f'all@{k}']) for k in (5, 10))}" for s in SYSTEMS]
        rows.append([label, str(figs["n"]), *cells, _fmt(figs["answered_empty"]),
                     f"{_fmt(figs['host']['answered'])} / {_fmt(figs['host']['right_at_1_where_answered'])}"])
    s = report["scores"]
    negs = s["negatives"]
    rows.append(["cross-haystack negatives abstained (tool / host)", str(negs["tool"]["n"]),
                 f"{_fmt(negs['tool']['abstained'])} / {_fmt(negs['host']['abstained'])}",
                 "", "", "", "", "", ""])
    rows.append(["results / tokens per search", "", f"{_fmt(s['results_per_search'])} / "
                 f"{_fmt(s['tokens_per_search'])}", "", "", "", "", "", ""])
    rows.append(["host-issued, where answered: records / share that answer", "",
                 f"{_fmt(s['host_injected']['records'])} / {_fmt(s['host_injected']['answering_share'])}",
                 "", "", "", "", "", ""])
    rows.append(["search p50 / p95 ms", "", f"{_fmt(s['search_ms']['p50'])} / {_fmt(s['search_ms']['p95'])}",
                 "", "", "", "", "", ""])
    return rows


def _turns_of(row: dict[str, Any] | None, ids: dict[str, list[str]]) -> dict[str, list[str]]:
    """The turns each fused candidate of a logged search holds."""
    if row is None:
        return {}
    return {f["id"]: ids.get(f["id"], []) for f in json.loads(row["fused"])}


def run_all(questions: list[dict[str, Any]], stores: Path | None, config_file: Path | None
            ) -> tuple[list[Asked], list[float], list[dict[str, Any]]]:
    """Every question and its negative; returns the searches, the write times of the
    haystacks written (not those reused from ``stores``) and every logged row with its
    labels (what ``--dump`` writes and benchmarks.fit_gate reads)."""
    paired = negatives(questions)
    searches: list[Asked] = []
    write_times: list[float] = []
    dumped: list[dict[str, Any]] = []
    for folder in _stores(stores):
        for i, q in enumerate(questions, 1):
            started = time.perf_counter()
            asked, write_s, rows, ids = run_question(q, paired.get(q["question_id"]), folder, config_file,
                                                     keep=stores is not None)
            searches += asked
            if write_s is not None:
                write_times.append(write_s)
            dumped += [{"question": a.question, "type": a.qtype, "trigger": a.trigger,
                        "haystack": q["question_id"], "negative": a.negative, "gold": sorted(a.gold),
                        "returned": [sorted(t) for t in a.returned["retold"]],
                        "row": rows.get(a.search_id or ""),
                        "turns_of": _turns_of(rows.get(a.search_id or ""), ids)} for a in asked]
            print(f"{i}/{len(questions)} {q['question_id']} {q['question_type']}: "
                  f"{time.perf_counter() - started:.1f} s", flush=True)
    return searches, write_times, dumped


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=data_path())
    parser.add_argument("--all", action="store_true", help="the whole split, not the sample")
    parser.add_argument("--per-type", type=int, default=PER_TYPE, help="sample size per type")
    parser.add_argument("--stores", type=Path, default=None, help="keep and reuse stores here")
    parser.add_argument("--dump", type=Path, default=None, help="write logged rows here (JSON)")
    parser.add_argument("--config", type=Path, default=None, help="config file to start from")
    parser.add_argument("--no-report", action="store_true", help="do not write benchmarks/results")
    parser.add_argument("--ids", nargs="+", default=None,
                        help="only these question ids (a change's effect on the questions it can touch)")
    args = parser.parse_args()
    if not args.data.exists():
        raise SystemExit(f"no LongMemEval data at {args.data}: pass --data or set LONGMEMEVAL_DATA")
    questions = sample(load_questions(args.data), None if args.all or args.ids else args.per_type)
    if args.ids:
        questions = [q for q in questions if q["question_id"] in set(args.ids)]
    searches, write_times, dumped = run_all(questions, args.stores, args.config)
    report = {
        "machine": machine(), "k": K, "questions": len(questions),
        "sample": ("chosen ids" if args.ids else "all" if args.all else f"first {args.per_type} per type"),
        "config": str(args.config or "defaults"),
        "write_s_per_question": round(statistics.median(write_times), 2) if write_times else None,
        "scores": score(searches),
        "per_question": per_question(searches),
    }
    if args.dump is not None:
        args.dump.write_text(json.dumps(dumped))
    for row in table(report):
        print(" | ".join(row))
    if not args.no_report:
        write_report(
            report_name("longmemeval", args.config), report, table(report),
            notes=(f"LongMemEval-S development split, {report['sample']} ({len(questions)} "
                   f"questions); every turn written through memory_write, each question searched "
                   f"once with k = {K}. Baselines over the same turns and vectors: dense cosine, "
                   "BM25 (porter), RRF of both. any@k: a gold turn in the first k; all@k: every "
                   "gold turn. Negatives: each question asked against another question's haystack "
                   "without its answer sessions."))


if __name__ == "__main__":
    main()
