"""What the gate trades: answers against abstention, beside a plain hybrid that abstains.

The retrieval benchmark's conversations and unseen wordings are searched once through the
real retriever (``benchmarks.retrieval_bench``), and every logged search is decided again
offline by the gate (what ``replay_gate`` does) under a range of settings:

* the configured gate;
* the pass beyond the question's names (``retrieval.gate.beyond_names_floor``) lowered step
  by step, the one floor that decides questions sharing nothing but a name with their
  record ("How does Pia earn money?" against "Pia works as a structural engineer").

Beside them, the in-run dense + BM25 (porter) RRF baseline is given the simplest way to
abstain: it answers only when the best dense cosine reaches a floor, chosen on half A as
the lowest that abstains on at least 90% of the unanswerable questions there (the lowest
keeps the most answers). So each row is a point of the trade-off between recall and
abstention, and a system is better only if it has more of one without less of the other.

Run: ``.venv/bin/python -m benchmarks.gate_tradeoff`` (about a minute). Writes
benchmarks/results/gate_tradeoff.json and gate_tradeoff.md.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from benchmarks.report import RESULTS, machine, pin_threads, write_report  # noqa: E402

pin_threads()

import numpy as np  # noqa: E402

from benchmarks import retrieval_bench  # noqa: E402
from benchmarks.calibrate_gate import MIN_ABSTENTION, Search, _parse  # noqa: E402
from retold.retrieve.gate import GateFloors, floors_for  # noqa: E402

KINDS = ("single_hop", "open_domain", "wrong_speaker")
BEYOND_STEPS = (0.40, 0.35, 0.30, 0.25)
COSINE_GRID = [round(0.10 + 0.01 * i, 2) for i in range(86)]  # 0.10 .. 0.95


def figures(answers: dict[str, list[str]], labels: list[dict[str, Any]]) -> dict[str, float]:
    """R@5 (answerable, and per kind in ``KINDS``), right-at-1 and abstention of ``answers``
    (question key -> returned record keys, best first)."""
    answerable = [q for q in labels if q["expected"]]

    def r5(qs: list[dict[str, Any]]) -> float:
        return float(np.mean([len(set(q["expected"]) & set(answers[q["question"]][:5])) / len(q["expected"])
                              for q in qs]))

    out = {"r@5": r5(answerable),
           **{f"{kind} r@5": r5([q for q in answerable if q["kind"] == kind]) for kind in KINDS},
           "right_at_1": float(np.mean([bool(answers[q["question"]])
                                        and answers[q["question"]][0] in q["expected"] for q in answerable])),
           "abstention": float(np.mean([not answers[q["question"]] for q in labels if not q["expected"]]))}
    return {name: round(value, 4) for name, value in out.items()}


def rrf_floor(questions: list[retrieval_bench.Question], half_a: set[str]) -> float:
    """The lowest cosine floor at which RRF abstains on ``MIN_ABSTENTION`` of half A's
    unanswerable questions (the highest on the grid when none does)."""
    unanswerable = [q for q in questions if q.key in half_a and not q.expected]
    for floor in COSINE_GRID:
        if np.mean([q.best_cosine < floor for q in unanswerable]) >= MIN_ABSTENTION:
            return floor
    return COSINE_GRID[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--conversations", type=int, default=None, help="only the first N")
    parser.add_argument("--results-dir", type=Path, default=None,
                        help="where gate_tradeoff.json and .md go (point smoke runs elsewhere)")
    args = parser.parse_args()
    conversations = json.loads(retrieval_bench.DATA.read_text())["conversations"][: args.conversations]
    with tempfile.TemporaryDirectory() as tmp:
        questions, logged, rt = retrieval_bench.run(
            conversations, Path(tmp) / "memory.sqlite",
            unseen=retrieval_bench.unseen_questions(len(conversations)))
        base = floors_for(rt.config.retrieval.gate, "tool")
        rt.close()
    keys: dict[str, str] = logged["keys"]
    labels = logged["searches"]
    halves = {half: [q for q in labels if q["half"] == half] for half in "ABU"}
    searches: dict[str, Search] = {
        q["question"]: _parse(q["row"], key=q["question"], group=q["half"], label=q["kind"],
                              expected=q["expected"], twin=q["twin"], current=q["current"], stale=q["stale"])
        for q in labels}
    settings: list[tuple[str, GateFloors]] = [("Retold, configured gate", base)]
    settings += [(f"Retold, beyond-names floor {floor:.2f}", replace(base, beyond_names_floor=floor))
                 for floor in BEYOND_STEPS if floor < base.beyond_names_floor]
    rows: list[tuple[str, dict[str, list[str]]]] = [
        (label, {key: s.returned(floors, keys) for key, s in searches.items()}) for label, floors in settings]
    floor = rrf_floor(questions, {q["question"] for q in halves["A"]})
    rrf = {q.key: q.outcomes["rrf"].keys for q in questions}
    rows += [("RRF, never abstains", rrf),
             (f"RRF, dense cosine floor {floor:.2f}",
              {q.key: (q.outcomes["rrf"].keys if q.best_cosine >= floor else []) for q in questions})]
    results: dict[str, Any] = {"machine": machine(), "min_abstention": MIN_ABSTENTION,
                               "configured_beyond": [base.beyond_names_floor, base.beyond_names_margin],
                               "rrf_cosine_floor": floor, "rows": {}}
    table = [["system", "half", "R@5", *(f"{kind} R@5" for kind in KINDS), "right@1", "abstention"]]
    for label, answers in rows:
        results["rows"][label] = {}
        for half, qs in halves.items():
            m = figures(answers, qs)
            results["rows"][label][half] = m
            table.append([label, half, f"{m['r@5']:.3f}", *(f"{m[f'{kind} r@5']:.3f}" for kind in KINDS),
                          f"{m['right_at_1']:.3f}", f"{m['abstention']:.3f}"])
    for line in table:
        print(" | ".join(line))
    write_report("gate_tradeoff", results, table, directory=args.results_dir or RESULTS,
                 notes=f"{len(halves['A'])}/{len(halves['B'])} searches in halves A/B, {len(halves['U'])} "
                       "in the unseen wordings (U). Retold rows: the logged searches decided again by "
                       "the gate under each setting (top 10 after the gate, before duplicate collapse "
                       f"and the budget); the configured pass beyond the names is floor "
                       f"{base.beyond_names_floor:.2f}, margin {base.beyond_names_margin:.2f}. RRF rows: "
                       f"the in-run baseline, and the same answering only when its best dense cosine "
                       f"reaches {floor:.2f}, the lowest floor abstaining on {MIN_ABSTENTION:.0%} of "
                       "half A's unanswerable questions.")


if __name__ == "__main__":
    main()
