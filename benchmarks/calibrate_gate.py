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

The floors of host-issued searches (``gate.auto``) are swept last, on the same logged
searches decided again under them (at most ``trigger.auto_k`` results, no session
summaries): nobody asked for such a search, so an answer nobody wanted costs more than a
missed one. No value may be looser than the tool floor just chosen, the constraints are
stricter (``AUTO_MIN_ABSTENTION``, ``AUTO_MAX_INJECTION``) and the objective adds
precision (the share of the first five results that are expected). First the plain floors
(``AUTO_GRID``) with every other pass as configured, then each other pass switched off or
on as the tool gate has it (``AUTO_SWITCHES``) with the floors held; the configured values
stay under the same keep rule.

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
from collections.abc import Callable
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
AUTO_MIN_ABSTENTION = 0.95
AUTO_MAX_INJECTION = 0.02
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
AUTO_GRID: dict[str, list[float]] = {
    "semantic": [0.65, 0.70, 0.75],
    "episodic": [0.50, 0.55, 0.60],
    "name_only_margin": [0.15, 0.20, 0.25],
    "two_name_margin": [0.0, 0.10, 0.20],
    "relative_floor": [0.0, 0.95],
}
# Each pass beyond the plain floors, and its keys' values when off; on, they are the tool's.
AUTO_SWITCHES: dict[str, dict[str, float | bool]] = {
    "standout": {"standout_margin": 0.0, "standout_floor": 1.0},
    "companions": {"companion_margin": 0.0, "companion_weight": 1.0},
    "asked_words": {"nameless_lexical_terms": 0},
    "beyond_names": {"beyond_names_floor": 1.0, "beyond_names_margin": 0.0},
    "links": {"follow_links": False},
}
# Tuned by the auto sweeps: a gate block's keys, with the two the tool sweeps leave alone.
AUTO_TUNED = (*TUNED_GATE, "standout_floor", "follow_links")


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

    def returned(self, floors: GateFloors, keys: dict[str, str], k: int = K) -> list[str]:
        kept = gate(self.candidates, self.kinds, floors, self.shape).kept[:k]
        return [keys.get(c.record_id, c.record_id) for c in kept]


def _parse(row: dict[str, Any], **labels: Any) -> Search:
    candidates, kinds, shape = logged_candidates(row)
    return Search(candidates=candidates, kinds=kinds, shape=shape, **labels)


def conversational_metrics(
    searches: list[Search], floors: GateFloors, keys: dict[str, str], k: int = K
) -> dict[str, float]:
    answers = {s.key: s.returned(floors, keys, k) for s in searches}
    answerable = [s for s in searches if s.expected]
    r5 = [len(set(s.expected) & set(answers[s.key][:5])) / len(s.expected) for s in answerable]
    # Of the first five results of an answered question, the share that is expected.
    precision = [len(set(s.expected) & set(answers[s.key][:5])) / len(answers[s.key][:5])
                 for s in answerable if answers[s.key]]
    abstained = [not answers[s.key] for s in searches if not s.expected]
    right = {s.key: bool(answers[s.key]) and answers[s.key][0] in s.expected for s in answerable}
    twins = [right[s.twin] for s in searches if not s.expected and s.twin in right]
    current = [bool(answers[s.key]) and answers[s.key][0] == s.current
               for s in answerable if s.current is not None and s.stale]
    figures = {"r@5": float(np.mean(r5)), "right_at_1": float(np.mean(list(right.values()))),
               "abstention": float(np.mean(abstained)),
               "twin_right_at_1": float(np.mean(twins)), "current_at_1": float(np.mean(current)),
               "precision@5": float(np.mean(precision)) if precision else 1.0}
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


def auto_objective(m: dict[str, float]) -> float:
    return (5 * objective(m) + m["precision@5"]) / 6


@dataclass(frozen=True)
class Rule:
    """What a sweep asks of a gate block: its constraints, result count and objective."""

    min_abstention: float
    max_injection: float
    k: int
    score: Callable[[dict[str, float]], float]


TOOL_RULE = Rule(MIN_ABSTENTION, MAX_INJECTION, K, objective)


def with_values(floors: GateFloors, values: dict[str, Any]) -> GateFloors:
    dense = replace(floors.dense_floor, semantic=values["semantic"], episodic=values["episodic"])
    return replace(floors, dense_floor=dense, **{name: values[name] for name in AUTO_TUNED if name in values})


# What the sweep's worker processes read; set before they fork.
_SWEPT: tuple[GateFloors, list[Search], list[Search], dict[str, str]] | None = None


def judge(floors: GateFloors, half_a: list[Search], hand: list[Search], keys: dict[str, str],
          rule: Rule = TOOL_RULE) -> tuple[bool, float]:
    """Whether ``floors`` meet both constraints of ``rule``, and their objective on half A."""
    m = conversational_metrics(half_a, floors, keys, rule.k)
    injection = hand_metrics(hand, floors, keys)["injection_rate"]
    return m["abstention"] >= rule.min_abstention and injection <= rule.max_injection, rule.score(m)


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


def values_of(floors: GateFloors) -> dict[str, Any]:
    """The swept values of a gate block."""
    return {"semantic": floors.dense_floor.semantic, "episodic": floors.dense_floor.episodic,
            **{name: getattr(floors, name) for name in AUTO_TUNED}}


def _best_point(base: GateFloors, points: list[dict[str, Any]], half_a: list[Search], hand: list[Search],
                keys: dict[str, str], rule: Rule = TOOL_RULE) -> tuple[dict[str, Any], bool, float]:
    """The point with the best objective among those meeting ``rule``'s constraints (the
    earliest on a tie), whether it meets them, and its objective."""
    best = (False, -1.0, 0)
    for index, values in enumerate(points):
        best = max(best, (*judge(with_values(base, values), half_a, hand, keys, rule), -index))
    feasible, objective_value, index = best
    return points[-index], feasible, objective_value


def sweep_beyond(base: GateFloors, held: dict[str, float], half_a: list[Search], hand: list[Search],
                 keys: dict[str, str]) -> tuple[dict[str, float], bool, float]:
    """The best ``BEYOND_GRID`` point with the other floors at ``held``, as :func:`sweep` judges."""
    points = [{**held, **dict(zip(BEYOND_GRID, combo, strict=True))}
              for combo in itertools.product(*BEYOND_GRID.values())]
    return _best_point(base, points, half_a, hand, keys)


def _switched(values: dict[str, Any], tool: dict[str, Any], on: tuple[bool, ...]) -> dict[str, Any]:
    """``values`` with each pass of ``AUTO_SWITCHES`` as the tool gate has it where ``on``, else off."""
    out = dict(values)
    for flag, off in zip(on, AUTO_SWITCHES.values(), strict=True):
        out.update({name: tool[name] for name in off} if flag else off)
    return out


@dataclass
class AutoSweep:
    best: dict[str, Any]  # the best floors, with the best switches over the floors chosen
    chosen: dict[str, Any]
    feasible: bool
    kept: tuple[bool, bool]  # whether the floors, then the switches, stayed as configured


def sweep_auto(base: GateFloors, before: dict[str, Any], tool: dict[str, Any], half_a: list[Search],
               hand: list[Search], keys: dict[str, str], least_gain: float, rule: Rule) -> AutoSweep:
    """The ``gate.auto`` values: the plain floors on ``AUTO_GRID`` (none looser than ``tool``),
    then the passes of ``AUTO_SWITCHES`` with the floors held, each stage under the keep rule."""
    grid = {name: [value for value in values if value >= tool[name]] for name, values in AUTO_GRID.items()}
    points = [{**before, **dict(zip(grid, combo, strict=True))}
              for combo in itertools.product(*grid.values())]
    found = _best_point(base, points, half_a, hand, keys, rule)
    floors, _, kept_floors = _chosen_or_kept(found, before, base, half_a, hand, keys, least_gain, rule)
    switches = list(itertools.product((False, True), repeat=len(AUTO_SWITCHES)))
    found_switches = _best_point(base, [_switched(floors, tool, on) for on in switches],
                                 half_a, hand, keys, rule)
    chosen, feasible, kept_switches = _chosen_or_kept(found_switches, floors, base, half_a, hand, keys,
                                                      least_gain, rule)
    best = {**found[0], **{name: found_switches[0][name] for off in AUTO_SWITCHES.values() for name in off}}
    return AutoSweep(best, chosen, feasible, (kept_floors, kept_switches))


def _chosen_or_kept(best: tuple[dict[str, Any], bool, float], before: dict[str, Any],
                    base: GateFloors, half_a: list[Search], hand: list[Search], keys: dict[str, str],
                    least_gain: float, rule: Rule = TOOL_RULE) -> tuple[dict[str, Any], bool, bool]:
    """(values, constraints met, configured kept): the configured values stay unless the best
    point beats them on half A by ``least_gain``."""
    values, feasible, objective_value = best
    configured_feasible, configured = judge(with_values(base, before), half_a, hand, keys, rule)
    if configured_feasible and objective_value - configured < least_gain:
        return before, True, True
    return values, feasible, False


def _shown(name: str, value: Any, code: bool = False) -> str:
    """A value as config.yaml (or, with ``code``, the dataclass defaults) writes it: counts
    as integers, switches as booleans."""
    if isinstance(value, bool):
        return str(value) if code else str(value).lower()
    return str(int(value)) if isinstance({**GRID, **BEYOND_GRID}.get(name, [0.0])[0], int) else f"{value:.2f}"


def _rewritten(name: str, value: Any, code: bool = False) -> Callable[[re.Match[str]], str]:
    """A substitution writing ``value`` over the matched one (group 2), the text left alone
    when it already says that value, the comment after it (group 3's padding) kept in its
    column."""
    def rewrite(match: re.Match[str]) -> str:
        old, padding = match.group(2), match.group(3)
        new = _shown(name, value, code)
        if old.lower() == new.lower() or (old[0].isdigit() and float(old) == float(new)):
            new = old
        return match.group(1) + new + (" " * max(1, len(old) + len(padding) - len(new)) if padding else "")
    return rewrite


def write_defaults(values: dict[str, Any], auto: dict[str, Any]) -> None:
    """Write the chosen floors, ``auto`` those of host-issued searches, into config.yaml and
    the retold/config_retrieval.py defaults."""
    yaml_path = ROOT / "config.yaml"
    text = yaml_path.read_text()
    for pattern, chosen, names in ((r"\n  gate:\n.*?\n    auto:", values, TUNED_GATE),
                                   (r"\n    auto:.*?\n    calibrated_for:", auto, AUTO_TUNED)):
        block = re.search(pattern, text, re.S)
        assert block is not None, f"config.yaml block {pattern} not found"
        body = block.group(0)
        for name in ("semantic", "episodic", *names):
            body = re.sub(rf"(\n {{4,8}}{name}: )([0-9.a-z]+)( *)", _rewritten(name, chosen[name]), body,
                          count=1)
        text = text[: block.start()] + body + text[block.end():]
    yaml_path.write_text(text)
    code_path = ROOT / "retold" / "config_retrieval.py"
    code = code_path.read_text()
    for cls, chosen, names in (("DenseFloors", values, ("semantic", "episodic")),
                               ("GateConfig", values, TUNED_GATE),
                               ("AutoGateConfig", auto, AUTO_TUNED)):
        found = re.search(rf"class {cls}:.*?\n\n\n", code, re.S)
        assert found is not None, cls
        body = found.group(0)
        if cls == "AutoGateConfig":  # its dense floors are set inside a default factory
            for name in ("semantic", "episodic"):
                body = re.sub(rf"({name}=)([0-9.]+)()", _rewritten(name, chosen[name], code=True), body,
                              count=1)
        for name in names:
            body = re.sub(rf"(\n    {name}: (?:float|int|bool) = )([0-9.A-Za-z]+)()",
                          _rewritten(name, chosen[name], code=True), body, count=1)
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
        auto_base = floors_for(rt.config.retrieval.gate, "auto")
        auto_k = rt.config.retrieval.trigger.auto_k
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
    before = values_of(base)
    # One unanswerable question of half A moves abstention by 1/n, the objective by a fifth of that.
    unanswerable_a = sum(1 for s in halves["A"] if not s.expected)
    least_gain = 1 / (5 * unanswerable_a)
    found = sweep(base, halves["A"], hand, keys)
    grid_best = {**found[0], **{name: before[name] for name in BEYOND_GRID}}
    # Either way the pair beyond the names is still the configured one here.
    chosen, _, kept = _chosen_or_kept((grid_best, *found[1:]), before, base, halves["A"], hand, keys,
                                      least_gain)
    found_beyond = sweep_beyond(base, chosen, halves["A"], hand, keys)
    chosen, feasible, kept_beyond = _chosen_or_kept(found_beyond, chosen, base, halves["A"], hand, keys,
                                                    least_gain)
    best_values = {**grid_best, **{name: found_beyond[0][name] for name in BEYOND_GRID}}
    auto_rule = Rule(AUTO_MIN_ABSTENTION, AUTO_MAX_INJECTION, auto_k, auto_objective)
    auto_before = values_of(auto_base)
    auto = sweep_auto(auto_base, auto_before, {**values_of(base), **chosen}, halves["A"], hand, keys,
                      1 / (6 * unanswerable_a), auto_rule)
    results: dict[str, Any] = {"machine": machine(), "model": model, "embedding_version": version, "k": K,
                               "min_abstention": MIN_ABSTENTION, "max_injection_rate": MAX_INJECTION,
                               "grid": GRID, "beyond_grid": BEYOND_GRID, "constraints_met": feasible,
                               "least_gain": round(least_gain, 5), "configured_kept": kept,
                               "configured_beyond_kept": kept_beyond,
                               "auto": {"k": auto_k, "min_abstention": AUTO_MIN_ABSTENTION,
                                        "max_injection_rate": AUTO_MAX_INJECTION, "grid": AUTO_GRID,
                                        "switches": AUTO_SWITCHES, "constraints_met": auto.feasible,
                                        "configured_floors_kept": auto.kept[0],
                                        "configured_switches_kept": auto.kept[1]}}
    table = [["floors", " / ".join(SHOWN), "half", "R@5", "right@1", "precision@5", "abstention",
              "twin right@1", "current@1", "hand P / R / injection"]]
    # The configured floors without the two-name relief: what it changes.
    one_name = {**before, "two_name_margin": before["name_only_margin"]}
    # And without the pass on the cosine beyond the names.
    no_beyond = {**before, "beyond_names_floor": 1.0}
    rows = [("before, one-name margin only", one_name, base, K),
            ("before, no pass beyond the names", no_beyond, base, K),
            ("before", before, base, K), ("best on half A", best_values, base, K),
            ("chosen", chosen, base, K), ("auto: before", auto_before, auto_base, auto_k),
            ("auto: best on half A", auto.best, auto_base, auto_k),
            ("auto: chosen", auto.chosen, auto_base, auto_k)]
    for label, values, block, k in rows:
        floors = with_values(block, values)
        hm = hand_metrics(hand, floors, keys)
        results[label] = {"floors": values, "hand": hm}
        for half in halves:
            m = conversational_metrics(halves[half], floors, keys, k)
            results[label][half] = m
            table.append([label, " / ".join(_shown(n, values[n]) for n in SHOWN), half, f"{m['r@5']:.3f}",
                          f"{m['right_at_1']:.3f}", f"{m['precision@5']:.3f}", f"{m['abstention']:.3f}",
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
                       + (", the configured pair kept the same way" if kept_beyond else "") + ". "
                       + f"Host-issued searches (auto rows, at most {auto_k} results, no session summaries): "
                       f"no value looser than the tool gate's, chosen on half A by the same mean with "
                       f"precision@5 added, with abstention >= {AUTO_MIN_ABSTENTION:.0%} and injection <= "
                       f"{AUTO_MAX_INJECTION:.0%}"
                       + ("" if auto.feasible else " (no point met both; best objective chosen)")
                       + "; the plain floors first, then the other passes switched off or as the tool "
                       "gate has them" + (", the configured floors kept" if auto.kept[0] else "")
                       + (", the configured switches kept" if auto.kept[1] else "") + ".")
    for line in table:
        print(" | ".join(line))
    if args.write_defaults:
        write_defaults(chosen, auto.chosen)
        print("wrote the chosen floors into config.yaml and retold/config_retrieval.py")


if __name__ == "__main__":
    main()
