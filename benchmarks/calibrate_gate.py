"""Gate calibration for the configured embedder: sweep the floors on labelled searches.

Two labelled sets are searched once through the real retriever with the configured
embedder (MiniLM on ONNX by default) and their logged rows re-decided offline by the gate
itself (``logged_candidates`` + ``gate``, what ``replay_gate`` does), so the sweep is the
decision the retriever makes:

* the conversational set (benchmarks/data/conversations.json, ``benchmarks.retrieval_bench``):
  floors are chosen on half A (even conversations) and checked on half B, and on the same
  records asked in wordings no sweep sees (benchmarks/data/unseen_wordings.json, row U);
* the hand-labelled set (benchmarks/data/calibration.json): questions with and without an
  answer and ordinary chat turns, reported with the chosen floors as a third check
  (precision, recall and the share of ordinary turns that get memory injected).

The objective on half A is the mean of answerable R@5, answerable right-at-1 (the first
result is an expected record), abstention on unanswerable questions, right-at-1 on their
answerable twins and current value at rank 1 after updates,
among floors that abstain on at least ``MIN_ABSTENTION`` of half A and inject into at most
``MAX_INJECTION`` of the ordinary turns; when no floor meets both, the best objective wins
and the report says so. The configured floors stay unless the best grid point beats them
on half A by at least what one unanswerable question weighs in the objective: a smaller
gain is one search flipping, and does not hold on half B any better than it loses there.
The two floors of the pass beyond the question's names (``BEYOND_GRID``) are swept after
that, on their own grid with the rest held, under the same objective and rule.

Run: ``.venv/bin/python -m benchmarks.calibrate_gate [--model M --version V --dims N]
[--write-defaults]``. ``--model``/``--version``/``--dims`` calibrate another embedding
(what ``retold reembed`` asks for before it switches models). Writes
benchmarks/results/calibration.json and calibration.md; ``--write-defaults`` also writes
the chosen floors into config.yaml and the defaults in retold/config_retrieval.py.
"""

from __future__ import annotations

import argparse
import itertools
import json
import multiprocessing
import os
import re
import tempfile
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]

from benchmarks.report import machine, pin_threads, write_report  # noqa: E402

pin_threads()

import numpy as np  # noqa: E402

from benchmarks import retrieval_bench  # noqa: E402
from retold import build_runtime, load_config  # noqa: E402
from retold.index.embedder import DEFAULT_MODEL  # noqa: E402
from retold.ingest.equivalence import ExactJudge  # noqa: E402
from retold.ingest.ingestor import WriteRequest  # noqa: E402
from retold.models import Candidate, EntityMention, Principal, QueryShape, Scope, SearchRequest  # noqa: E402
from retold.retrieve.gate import GateFloors, RecordKind, floors_for, gate  # noqa: E402
from retold.retrieve.replay import logged_candidates  # noqa: E402

AGENT = "research-agent"
HAND = ROOT / "benchmarks" / "data" / "calibration.json"
MIN_ABSTENTION = 0.90
MAX_INJECTION = 0.10
K = 10
GRID: dict[str, list[float]] = {
    "semantic": [0.60, 0.65, 0.70],
    "episodic": [0.45, 0.50, 0.55],
    "relative_floor": [0.0],
    "name_only_margin": [0.10, 0.15, 0.20],
    "two_name_margin": [0.0, 0.05, 0.10],
    "standout_margin": [0.08, 0.10, 0.12],
    "companion_margin": [0.05, 0.07, 0.10],
    "companion_weight": [0.7, 1.0],
    "nameless_lexical_floor": [0.35, 0.40],
    "nameless_lexical_terms": [0, 3],
}
# The cosine beyond the question's names, swept second with the grid's choice held: the
# two only decide records that every other floor refused, so they barely interact with it.
BEYOND_GRID: dict[str, list[float]] = {
    "beyond_names_floor": [0.40, 0.42, 0.45, 0.48, 0.50, 1.0],
    "beyond_names_margin": [0.0, 0.05, 0.08, 0.10, 0.12, 0.15],
}
# Tuned by the two sweeps; the rest of a gate block keeps its configured value.
TUNED_GATE = ("relative_floor", "name_only_margin", "two_name_margin", "standout_margin",
              "companion_margin", "companion_weight", "nameless_lexical_floor", "nameless_lexical_terms",
              *BEYOND_GRID)
SHOWN = (*GRID, *BEYOND_GRID)


def build_hand(store_path: Path, data: dict[str, Any], embedding: dict[str, object] | None,
               ) -> tuple[Any, dict[str, str]]:
    """Write the hand-labelled records through the ingestor; return the runtime and id -> key."""
    store = {"path": str(store_path)}
    config = load_config(overrides=retrieval_bench.calibration_overrides(store, embedding))
    rt = build_runtime(config, judge=ExactJudge())
    names = {r["user"]: r["about"][1] for r in data["records"]
             if r["scope"] == f"user:{r['user']}" and r["about"] and r["about"][0] == "person"}
    for user in data["users"]:
        rt.host.grant(AGENT, Scope("user", user), read=True, write=True)
        rt.host.provision_user(user, aliases=[names.get(user, user.title())])
    for project in data["projects"]:
        rt.host.grant(AGENT, Scope("project", project), read=True, write=True)
        for user in data["users"]:  # the labelled data lets every user read every project
            rt.host.add_member(Scope("project", project), user)
    keys: dict[str, str] = {}
    for rec in data["records"]:
        mentions = [EntityMention(k, n, "mentions") for k, n in rec["mentions"]]
        if rec["about"]:
            mentions.insert(0, EntityMention(rec["about"][0], rec["about"][1], "about"))
        result = rt.ingestor.write(Principal(AGENT, rec["user"], None, None), WriteRequest(
            type=rec["type"], content=rec["content"], attribute=rec["attribute"],
            target=Scope.parse(rec["scope"]), source_kind="system",
            event_at=datetime.fromisoformat(rec["event_at"].replace("Z", "+00:00")),
            entities=tuple(mentions),
        ), origin="host")
        if not result.ok or result.record_id is None:
            raise SystemExit(f"{rec['key']}: {result.outcome} {result.note}")
        keys[result.record_id] = rec["key"]
    return rt, keys


@dataclass
class Search:
    """One logged search, parsed once, with its labels."""

    key: str
    group: str  # "A", "B" (conversational halves) or "hand"
    label: str  # conversational kind, or the hand-labelled class
    expected: list[str]
    twin: str | None
    current: str | None
    stale: list[str]
    candidates: list[Candidate]
    kinds: dict[str, RecordKind]
    shape: QueryShape

    def returned(self, floors: GateFloors, keys: dict[str, str]) -> list[str]:
        kept = gate(self.candidates, self.kinds, floors, self.shape).kept[:K]
        return [keys.get(c.record_id, c.record_id) for c in kept]


def _parse(row: dict[str, Any], **labels: Any) -> Search:
    candidates, kinds, shape = logged_candidates(row)
    return Search(candidates=candidates, kinds=kinds, shape=shape, **labels)


def conversational_metrics(
    searches: list[Search], floors: GateFloors, keys: dict[str, str]
) -> dict[str, float]:
    answers = {s.key: s.returned(floors, keys) for s in searches}
    answerable = [s for s in searches if s.expected]
    r5 = [len(set(s.expected) & set(answers[s.key][:5])) / len(s.expected) for s in answerable]
    abstained = [not answers[s.key] for s in searches if not s.expected]
    right = {s.key: bool(answers[s.key]) and answers[s.key][0] in s.expected for s in answerable}
    twins = [right[s.twin] for s in searches if not s.expected and s.twin in right]
    current = [bool(answers[s.key]) and answers[s.key][0] == s.current
               for s in answerable if s.current is not None and s.stale]
    figures = {"r@5": float(np.mean(r5)), "right_at_1": float(np.mean(list(right.values()))),
               "abstention": float(np.mean(abstained)),
               "twin_right_at_1": float(np.mean(twins)), "current_at_1": float(np.mean(current))}
    return {name: round(value, 4) for name, value in figures.items()}


def hand_metrics(searches: list[Search], floors: GateFloors, keys: dict[str, str]) -> dict[str, float]:
    tp = fp = fn = injected = ordinary = 0
    for s in searches:
        returned = s.returned(floors, keys)[:8]
        if s.label == "ordinary":
            ordinary += 1
            injected += bool(returned)
            continue
        hits = set(s.expected) & set(returned)
        tp += len(hits)
        fp += len(set(returned) - set(s.expected))
        fn += len(set(s.expected) - hits)
    precision = tp / (tp + fp) if tp + fp else 1.0
    recall = tp / (tp + fn) if tp + fn else 1.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": round(precision, 4), "recall": round(recall, 4), "f1": round(f1, 4),
            "injection_rate": round(injected / ordinary if ordinary else 0.0, 4)}


def objective(m: dict[str, float]) -> float:
    return (m["r@5"] + m["right_at_1"] + m["abstention"] + m["twin_right_at_1"]
            + m["current_at_1"]) / 5


def with_values(floors: GateFloors, values: dict[str, float]) -> GateFloors:
    dense = replace(floors.dense_floor, semantic=values["semantic"], episodic=values["episodic"])
    return replace(floors, dense_floor=dense, **{name: values[name] for name in TUNED_GATE if name in values})


# What the sweep's worker processes read; set before they fork.
_SWEPT: tuple[GateFloors, list[Search], list[Search], dict[str, str]] | None = None


def judge(floors: GateFloors, half_a: list[Search], hand: list[Search], keys: dict[str, str]
          ) -> tuple[bool, float]:
    """Whether ``floors`` meet both constraints, and their objective on half A."""
    m = conversational_metrics(half_a, floors, keys)
    injection = hand_metrics(hand, floors, keys)["injection_rate"]
    return m["abstention"] >= MIN_ABSTENTION and injection <= MAX_INJECTION, objective(m)


def _best_of(start: int, step: int) -> tuple[bool, float, int]:
    """(feasible, objective, -index) of the best of every ``step``-th grid point from ``start``."""
    assert _SWEPT is not None
    base, half_a, hand, keys = _SWEPT
    best = (False, -1.0, 0)
    for index, combo in enumerate(itertools.product(*GRID.values())):
        if index % step == start:
            floors = with_values(base, dict(zip(GRID, combo, strict=True)))
            best = max(best, (*judge(floors, half_a, hand, keys), -index))  # ties: the earlier point
    return best


def sweep(base: GateFloors, half_a: list[Search], hand: list[Search], keys: dict[str, str]
          ) -> tuple[dict[str, float], bool, float]:
    """The grid point with the best objective among those meeting both constraints, whether
    it meets them, and its objective; the grid split over one process per core."""
    global _SWEPT
    _SWEPT = (base, half_a, hand, keys)
    workers = max(1, min(os.cpu_count() or 1, 8))
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        found = pool.starmap(_best_of, [(start, workers) for start in range(workers)])
    feasible, best, index = max(found)
    combo = next(itertools.islice(itertools.product(*GRID.values()), -index, None))
    return dict(zip(GRID, combo, strict=True)), feasible, best


def sweep_beyond(base: GateFloors, held: dict[str, float], half_a: list[Search], hand: list[Search],
                 keys: dict[str, str]) -> tuple[dict[str, float], bool, float]:
    """The best ``BEYOND_GRID`` point with the other floors at ``held``, as :func:`sweep` judges."""
    best = (False, -1.0, 0)
    points = list(itertools.product(*BEYOND_GRID.values()))
    for index, combo in enumerate(points):
        values = {**held, **dict(zip(BEYOND_GRID, combo, strict=True))}
        best = max(best, (*judge(with_values(base, values), half_a, hand, keys), -index))
    feasible, objective_value, index = best
    return {**held, **dict(zip(BEYOND_GRID, points[-index], strict=True))}, feasible, objective_value


def _chosen_or_kept(best: tuple[dict[str, float], bool, float], before: dict[str, float],
                    base: GateFloors, half_a: list[Search], hand: list[Search], keys: dict[str, str],
                    least_gain: float) -> tuple[dict[str, float], bool, bool]:
    """(values, constraints met, configured kept): the configured values stay unless the best
    point beats them on half A by ``least_gain``."""
    values, feasible, objective_value = best
    configured_feasible, configured = judge(with_values(base, before), half_a, hand, keys)
    if configured_feasible and objective_value - configured < least_gain:
        return before, True, True
    return values, feasible, False


def _shown(name: str, value: float) -> str:
    """A value as config.yaml and the dataclass defaults write it: counts as integers."""
    return str(int(value)) if isinstance({**GRID, **BEYOND_GRID}[name][0], int) else f"{value:.2f}"


def write_defaults(values: dict[str, float]) -> None:
    """Write the chosen floors into config.yaml and the retold/config_retrieval.py defaults."""
    yaml_path = ROOT / "config.yaml"
    text = yaml_path.read_text()
    block = re.search(r"\n  gate:\n.*?\n    auto:", text, re.S)
    assert block is not None, "config.yaml gate block not found"
    body = block.group(0)
    for name in ("semantic", "episodic", *TUNED_GATE):
        body = re.sub(rf"(\n {{4,6}}{name}: )[0-9.]+", rf"\g<1>{_shown(name, values[name])}", body, count=1)
    yaml_path.write_text(text[: block.start()] + body + text[block.end():])
    code_path = ROOT / "retold" / "config_retrieval.py"
    code = code_path.read_text()
    for cls, names in (("DenseFloors", ("semantic", "episodic")),
                       ("GateConfig", TUNED_GATE)):
        found = re.search(rf"class {cls}:.*?\n\n\n", code, re.S)
        assert found is not None, cls
        body = found.group(0)
        for name in names:
            body = re.sub(rf"(\n    {name}: (?:float|int) = )[0-9.]+", rf"\g<1>{_shown(name, values[name])}",
                          body, count=1)
        code = code[: found.start()] + body + code[found.end():]
    code_path.write_text(code)


def calibration_report(model: str) -> str:
    """``calibration`` for the shipped model; another model's sweep gets a file of its own,
    so calibrating the int8 variant keeps the float figures."""
    if model == DEFAULT_MODEL:
        return "calibration"
    return "calibration_" + re.sub(r"[^A-Za-z0-9]+", "_", model.rsplit("/", 1)[-1]).strip("_").lower()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write-defaults", action="store_true",
                        help="write the chosen floors into config.yaml and retold/config_retrieval.py")
    parser.add_argument("--model", help="embedding model to calibrate (default: embedding.model)")
    parser.add_argument("--version", help="its embedding version tag (default: embedding.version)")
    parser.add_argument("--dims", type=int, help="its vector width (default: embedding.dims)")
    args = parser.parse_args()
    if args.write_defaults and args.model not in (None, DEFAULT_MODEL):
        # config.yaml and the dataclass defaults hold the shipped model's floors only.
        parser.error(f"--write-defaults writes the floors of {DEFAULT_MODEL}; set another model's "
                     "in its own config file (config.int8.yaml for the int8 variant)")
    embedding = {key: value for key, value in
                 (("model", args.model), ("version", args.version), ("dims", args.dims))
                 if value is not None}
    hand_data = json.loads(HAND.read_text())
    conversations = json.loads(retrieval_bench.DATA.read_text())["conversations"]
    with tempfile.TemporaryDirectory() as tmp:
        rt, keys = build_hand(Path(tmp) / "hand.sqlite", hand_data, embedding)
        base = floors_for(rt.config.retrieval.gate, "tool")
        hand: list[Search] = []
        for query in hand_data["queries"]:
            outcome = rt.retriever.search(Principal(AGENT, query["user"], None, None),
                                          SearchRequest(queries=[query["text"]], k=K))
            rt.flush_search_log()
            row = rt.store.search_log_row(outcome.response.search_id)
            hand.append(_parse(row, key=query["key"], group="hand", label=query["class"],
                               expected=query["expected"], twin=None, current=None, stale=[]))
        model, version = rt.embedder.name, rt.embedder.version
        rt.close()
        _, logged, conv_rt = retrieval_bench.run(
            conversations, Path(tmp) / "conversations.sqlite", embedding,
            unseen=retrieval_bench.unseen_questions(len(conversations)))
        conv_rt.close()
    keys.update(logged["keys"])
    halves: dict[str, list[Search]] = {"A": [], "B": [], "U": []}
    for s in logged["searches"]:
        halves[s["half"]].append(_parse(s["row"], key=s["question"], group=s["half"], label=s["kind"],
                                        expected=s["expected"], twin=s["twin"], current=s["current"],
                                        stale=s["stale"]))
    before = {"semantic": base.dense_floor.semantic, "episodic": base.dense_floor.episodic,
              **{name: getattr(base, name) for name in TUNED_GATE}}
    # One unanswerable question of half A moves abstention by 1/n, the objective by a fifth of that.
    least_gain = 1 / (5 * sum(1 for s in halves["A"] if not s.expected))
    found = sweep(base, halves["A"], hand, keys)
    grid_best = {**found[0], **{name: before[name] for name in BEYOND_GRID}}
    # Either way the pair beyond the names is still the configured one here.
    chosen, _, kept = _chosen_or_kept((grid_best, *found[1:]), before, base, halves["A"], hand, keys,
                                      least_gain)
    found_beyond = sweep_beyond(base, chosen, halves["A"], hand, keys)
    chosen, feasible, kept_beyond = _chosen_or_kept(found_beyond, chosen, base, halves["A"], hand, keys,
                                                    least_gain)
    best_values = {**grid_best, **{name: found_beyond[0][name] for name in BEYOND_GRID}}
    results: dict[str, Any] = {"machine": machine(), "model": model, "embedding_version": version, "k": K,
                               "min_abstention": MIN_ABSTENTION, "max_injection_rate": MAX_INJECTION,
                               "grid": GRID, "beyond_grid": BEYOND_GRID, "constraints_met": feasible,
                               "least_gain": round(least_gain, 5), "configured_kept": kept,
                               "configured_beyond_kept": kept_beyond}
    table = [["floors", " / ".join(SHOWN), "half", "R@5", "right@1", "abstention",
              "twin right@1", "current@1", "hand P / R / injection"]]
    # The configured floors without the two-name relief: what it changes.
    one_name = {**before, "two_name_margin": before["name_only_margin"]}
    # And without the pass on the cosine beyond the names.
    no_beyond = {**before, "beyond_names_floor": 1.0}
    rows = [("before, one-name margin only", one_name), ("before, no pass beyond the names", no_beyond),
            ("before", before), ("best on half A", best_values), ("chosen", chosen)]
    for label, values in rows:
        floors = with_values(base, values)
        hm = hand_metrics(hand, floors, keys)
        results[label] = {"floors": values, "hand": hm}
        for half in halves:
            m = conversational_metrics(halves[half], floors, keys)
            results[label][half] = m
            table.append([label, " / ".join(_shown(n, values[n]) for n in SHOWN), half, f"{m['r@5']:.3f}",
                          f"{m['right_at_1']:.3f}", f"{m['abstention']:.3f}",
                          f"{m['twin_right_at_1']:.3f}", f"{m['current_at_1']:.3f}",
                          f"{hm['precision']:.3f} / {hm['recall']:.3f} / {hm['injection_rate']:.3f}"])
    write_report(calibration_report(model), results, table,
                 notes=f"{model} (embedding.version {version}); conversational set halves A/B "
                       f"({len(halves['A'])}/{len(halves['B'])} searches), unseen wordings U "
                       f"({len(halves['U'])}), hand-labelled set "
                       f"({len(hand)} queries). Chosen on half A: best mean of R@5, right-at-1, "
                       f"abstention, twin right-at-1 and current-at-1 with abstention >= "
                       f"{MIN_ABSTENTION:.0%} and injection <= {MAX_INJECTION:.0%}"
                       + ("" if feasible else " (no floor met both; best objective chosen)")
                       + (f"; the configured floors are kept, since no grid point beats them on half A "
                          f"by {least_gain:.4f} (one unanswerable question)" if kept else "")
                       + "; then the floors beyond the names on their own grid, the rest held"
                       + (", the configured pair kept the same way" if kept_beyond else "") + ".")
    for line in table:
        print(" | ".join(line))
    if args.write_defaults:
        write_defaults(chosen)
        print("wrote the chosen floors into config.yaml and retold/config_retrieval.py")


if __name__ == "__main__":
    main()
