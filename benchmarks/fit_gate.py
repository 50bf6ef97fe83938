"""Fit the gate for the configured embedder: the answer score, its two thresholds, the tail cut.

Two labelled sets are searched through the real retriever with the configured embedder
(MiniLM on ONNX by default), and every logged search is read back from its search_log row:

* LongMemEval-S dev (``benchmarks.longmemeval_bench``): each answerable question on its own
  haystack, and asked again against another question's haystack that lacks its answer (a
  cross-haystack negative). Public conversations nobody here wrote; a development split,
  so it fits.
* the conversational set (``benchmarks.retrieval_bench``): answerable and unanswerable
  questions about people, accounts and projects; half A fits, half B and the unseen
  wordings only check.

The hand-labelled set (benchmarks/data/calibration.json) checks too: questions with and
without an answer and ordinary chat turns, where a host-issued search should inject nothing.

The steps, each with the reason it is the way it is:

1. **Weights.** A logistic regression (ridge ``RIDGE``) of "this store holds an answer" on
   the signals as the searches logged them, over half A and LongMemEval dev, each set
   weighted to the same total so neither's size decides. Its output is a chance, which is
   what the thresholds below mean.
2. **Tool threshold, recall first.** The highest threshold under which at most
   ``TOOL_MAX_EMPTY`` of the answerable questions of each fit set come back empty: a model
   that asked judges what it reads, so a search abstains only when the score says the
   store holds nothing on the question. The share is a third of the most a user should
   see empty (3%), since a threshold read off a hundred-odd questions moves with the
   sample (the split check below measures by how much).
3. **Host-issued threshold, precision first.** The lowest threshold that abstains on at
   least ``AUTO_MIN_ABSTAIN`` of the unanswerable questions of each fit set: nobody asked
   for such a search, and memory injected into an ordinary turn costs more than a miss.
   The share is above the 90% a user should see, for the same reason as the tool's.
4. **Tail fractions.** Each logged search decided again with the fitted score
   (:func:`retold.retrieve.replay.replay`) under each fraction of ``TAIL_GRID``.
   Tool searches, recall first: the largest fraction that costs answerable recall at 10
   at most ``TAIL_MAX_LOSS`` on each fit set. Host-issued searches, precision first: the
   fraction with the best F1 at ``trigger.host_k`` (what the injection holds that answers,
   against what it misses), averaged over the fit sets. Every record a host-issued search
   injects lands in a prompt nobody asked it for, so one that answers nothing costs as
   much as one missed, which recall alone does not count.

Beside the fit the report shows how far it carries (:func:`split_check`): the same steps
on half A and one half of LongMemEval dev, checked on the other half. Thresholds and tails
sit where the fit sets' own questions stop allowing them, so a question the fit never saw
can fall on the wrong side, which the held-out half shows.

Run: ``.venv/bin/python -m benchmarks.fit_gate [--own-dump F] [--lme-dump F] [--config FILE]
[--write-defaults]``. The dumps are what ``retrieval_bench --dump`` and
``longmemeval_bench --all --dump`` wrote under the same config (``make bench`` passes
them); without them both benchmarks run first. Writes benchmarks/results/gate_fit.json and
.md; ``--write-defaults`` writes the fitted values into the config file (``config.yaml``,
and the dataclass defaults in retold/config/retrieval.py; with ``--config``, that file).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]

from benchmarks.report import machine, pin_threads, report_name, write_report  # noqa: E402

pin_threads()

import numpy as np  # noqa: E402

from benchmarks import longmemeval_bench, retrieval_bench  # noqa: E402
from retold import build_runtime, load_config  # noqa: E402
from retold.config import GateConfig, PerTrigger, RetrievalConfig, SignalWeights  # noqa: E402
from retold.ingest.equivalence import ExactJudge  # noqa: E402
from retold.ingest.ingestor import WriteRequest  # noqa: E402
from retold.models import EntityMention, Principal, Scope, SearchRequest  # noqa: E402
from retold.plain import to_plain  # noqa: E402
from retold.retrieve.fusion import Scale, scaled  # noqa: E402
from retold.retrieve.replay import logged_signals, replay  # noqa: E402
from retold.retrieve.signals import SIGNAL_NAMES  # noqa: E402

HAND = ROOT / "benchmarks" / "data" / "calibration.json"
RIDGE = 1.0
TOOL_MAX_EMPTY = 0.01
AUTO_MIN_ABSTAIN = 0.95
TAIL_GRID = tuple(round(0.05 * i, 2) for i in range(20))  # 0 to 0.95
TAIL_MAX_LOSS = 0.005
TOOL_K = 10
# Tool thresholds the report shows the trade-off at: empties on LongMemEval against
# abstention on the unseen wordings.
TRADEOFF_GRID = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6)
# Host-issued tail fractions the report shows the trade-off at: what is injected, and how
# much of it answers, against what is missed.
HOST_TAIL_TRADEOFF = (0.2, 0.5, 0.7, 0.95)


@dataclass
class Search:
    """One logged search and what it should find."""

    set: str  # "A", "B", "U" (conversational set) or "L" (LongMemEval dev)
    trigger: str
    row: dict[str, Any]
    expected: frozenset[str]  # keys of the records (or turns) that answer it; empty = none
    keys: dict[str, frozenset[str]]  # record id -> the keys it holds
    kind: str = ""  # the question's kind or type
    half: int = 0  # LongMemEval: which half of the split its haystack falls in (split_check)

    @property
    def answerable(self) -> bool:
        return bool(self.expected)

    def hits(self, record_ids: Sequence[str], k: int) -> float:
        """Share of the expected keys among the first ``k`` records (any for LongMemEval,
        whose questions are scored by any gold turn)."""
        found = frozenset().union(*(self.keys.get(r, frozenset()) for r in record_ids[:k]))
        if self.set == "L":
            return float(bool(found & self.expected))
        return len(found & self.expected) / len(self.expected)


def own_searches(logged: dict[str, Any]) -> list[Search]:
    keys = {rid: frozenset([key]) for rid, key in logged["keys"].items()}
    return [Search(s["half"], "tool", s["row"], frozenset(s["expected"]), keys, s["kind"])
            for s in logged["searches"] if s["row"] is not None]


def lme_searches(dumped: list[dict[str, Any]]) -> list[Search]:
    """The dumped searches; haystacks alternate between the two halves in file order, which
    holds each type's questions together, so each half has half of every type."""
    if any("haystack" not in d for d in dumped):
        raise SystemExit("the LongMemEval dump predates the haystack field: write it again with "
                         "`longmemeval_bench --all --dump`")
    order = {h: i for i, h in enumerate(dict.fromkeys(d["haystack"] for d in dumped))}
    return [Search("L", d["trigger"], d["row"], frozenset(d["gold"]),
                   {rid: frozenset(turns) for rid, turns in d["turns_of"].items()}, d["type"],
                   order[d["haystack"]] % 2)
            for d in dumped if d["row"] is not None]


def hand_searches(store: Path, config_file: Path | None) -> list[Search]:
    """The hand-labelled records written through the ingestor and every query searched
    once; an ordinary chat turn counts as a question without an answer."""
    data = json.loads(HAND.read_text())
    config = load_config(config_file, overrides={"store": {"path": str(store)},
                                                 "embedding": {"torch_threads": 1}})
    rt = build_runtime(config, judge=ExactJudge())
    names = {r["user"]: r["about"][1] for r in data["records"]
             if r["scope"] == f"user:{r['user']}" and r["about"] and r["about"][0] == "person"}
    agent = "research-agent"  # the agent whose private scope the set's records name
    for user in data["users"]:
        rt.host.grant(agent, Scope("user", user), read=True, write=True)
        rt.host.provision_user(user, aliases=[names.get(user, user.title())])
    for project in data["projects"]:
        rt.host.grant(agent, Scope("project", project), read=True, write=True)
        for user in data["users"]:  # the labelled data lets every user read every project
            rt.host.add_member(Scope("project", project), user)
    keys: dict[str, frozenset[str]] = {}
    for rec in data["records"]:
        mentions = [EntityMention(kind, name, "mentions") for kind, name in rec["mentions"]]
        if rec["about"]:
            mentions.insert(0, EntityMention(rec["about"][0], rec["about"][1], "about"))
        result = rt.ingestor.write(Principal(agent, rec["user"], None, None), WriteRequest(
            type=rec["type"], content=rec["content"], attribute=rec["attribute"],
            target=Scope.parse(rec["scope"]), source_kind="system",
            event_at=datetime.fromisoformat(rec["event_at"].replace("Z", "+00:00")),
            entities=tuple(mentions)), origin="host")
        if not result.ok or result.record_id is None:
            raise SystemExit(f"{rec['key']}: {result.outcome} {result.note}")
        keys[result.record_id] = frozenset([rec["key"]])
    ids = [(q, rt.retriever.search(Principal(agent, q["user"], None, None),
                                   SearchRequest(queries=[q["text"]])).response.search_id)
           for q in data["queries"]]
    rt.flush_search_log()
    rows = {row["id"]: row for row in rt.store.search_log_rows()}
    rt.close()
    return [Search("H", "tool", rows[sid], frozenset(q["expected"]), keys) for q, sid in ids]


def _features(searches: Sequence[Search]) -> np.ndarray:
    return np.array([[logged_signals(s.row).as_dict()[n] for n in SIGNAL_NAMES] for s in searches])


def fit_weights(groups: Sequence[Sequence[Search]]) -> tuple[np.ndarray, float]:
    """Ridge logistic regression by Newton's method; each group weighs the same in total."""
    x = np.vstack([_features(g) for g in groups])
    y = np.concatenate([[float(s.answerable) for s in g] for g in groups])
    sample = np.concatenate([np.full(len(g), 1.0 / len(g)) for g in groups]) * len(y) / len(groups)
    design = np.c_[x, np.ones(len(x))]
    w = np.zeros(design.shape[1])
    penalty = RIDGE * np.r_[np.ones(x.shape[1]), 0.0]  # the bias is not shrunk
    for _ in range(100):
        p = 1.0 / (1.0 + np.exp(-design @ w))
        grad = design.T @ (sample * (p - y)) + penalty * w
        hess = (design.T * (sample * p * (1 - p))) @ design + np.diag(penalty)
        step = np.linalg.solve(hess, grad)
        w -= step
        if np.abs(step).max() < 1e-9:
            break
    return w[:-1], float(w[-1])


def _scores(searches: Sequence[Search], gate: GateConfig) -> np.ndarray:
    x = _features(searches)
    weights = np.array([getattr(gate.weights, n) for n in SIGNAL_NAMES])
    return 1.0 / (1.0 + np.exp(-(x @ weights + gate.bias)))


def tool_threshold(fit: Sequence[Sequence[Search]], gate: GateConfig) -> float:
    """The highest two-decimal threshold keeping empties at most TOOL_MAX_EMPTY per set."""
    best = 1.0
    for group in fit:
        scores = np.sort(_scores([s for s in group if s.answerable], gate))
        allowed = int(np.floor(TOOL_MAX_EMPTY * len(scores)))  # this many may fall below
        best = min(best, float(scores[allowed]))
    return round(float(np.floor(best * 100) / 100), 2)


def host_threshold(fit: Sequence[Sequence[Search]], gate: GateConfig) -> float:
    """The lowest two-decimal threshold abstaining on at least AUTO_MIN_ABSTAIN per set."""
    worst = 0.0
    for group in fit:
        scores = np.sort(_scores([s for s in group if not s.answerable], gate))
        at = min(len(scores) - 1, int(np.ceil(AUTO_MIN_ABSTAIN * len(scores))) - 1)
        worst = max(worst, float(scores[at]))
    return round(float(np.floor(worst * 100) / 100 + 0.01), 2)


def _recall(searches: Sequence[Search], gate: GateConfig, trigger: str, k: int) -> float:
    found = [s.hits(replay(s.row, gate, trigger=trigger).kept, k) for s in searches if s.answerable]
    return float(np.mean(found)) if found else 0.0


def _with_tail(gate: GateConfig, trigger: str, t: float) -> GateConfig:
    return replace(gate, tail_fraction=replace(gate.tail_fraction, **{trigger: t}))


def tool_tail_fraction(fit: Sequence[Sequence[Search]], gate: GateConfig, k: int) -> float:
    """The largest TAIL_GRID fraction costing recall@k at most TAIL_MAX_LOSS per fit set."""
    base = [_recall(g, _with_tail(gate, "tool", 0.0), "tool", k) for g in fit]
    chosen = 0.0
    for t in TAIL_GRID[1:]:
        tailed = _with_tail(gate, "tool", t)
        losses = [b - _recall(g, tailed, "tool", k) for g, b in zip(fit, base, strict=True)]
        if max(losses) <= TAIL_MAX_LOSS:
            chosen = t
        else:
            break
    return chosen


def injected(searches: Sequence[Search], gate: GateConfig, k: int) -> dict[str, float | None]:
    """What host-issued searches of the answerable questions inject where they answer:
    records per search, the share of them that answer (precision), the share of the
    expected records among them (recall) and the two's F1, all at ``k``."""
    records, precision, recall = [], [], []
    for s in searches:
        if not s.answerable:
            continue
        replayed = replay(s.row, gate, trigger="host")
        if not replayed.decision.answered:
            continue
        kept = replayed.kept[:k]
        records.append(len(kept))
        precision.append(float(np.mean([bool(s.keys.get(r, frozenset()) & s.expected) for r in kept]))
                         if kept else 0.0)
        recall.append(s.hits(kept, k))
    if not records:
        return {"records": None, "precision": None, "recall": None, "f1": None}
    p, r = float(np.mean(precision)), float(np.mean(recall))
    return {"records": round(float(np.mean(records)), 4), "precision": round(p, 4), "recall": round(r, 4),
            "f1": round(2 * p * r / (p + r), 4) if p + r else 0.0}


def host_tail_fraction(fit: Sequence[Sequence[Search]], gate: GateConfig, k: int) -> float:
    """The TAIL_GRID fraction with the best F1 at k, averaged over the fit sets (the
    smaller fraction where two tie)."""
    def mean_f1(t: float) -> float:
        return float(np.mean([injected(g, _with_tail(gate, "host", t), k)["f1"] or 0.0 for g in fit]))
    return max(TAIL_GRID, key=lambda t: (round(mean_f1(t), 4), -t))


def check(searches: Sequence[Search], gate: GateConfig, host_k: int) -> dict[str, Any]:
    """What the gate does on one set: tool empties and abstention, host-issued abstention,
    how often a host-issued search answers an answerable question, right at 1 then and
    what it injects (:func:`injected`)."""
    def ratio(values: list[float]) -> float | None:
        return round(float(np.mean(values)), 4) if values else None
    answerable = [s for s in searches if s.answerable]
    unanswerable = [s for s in searches if not s.answerable]
    tool = {id(s): replay(s.row, gate, trigger="tool") for s in searches}
    host = {id(s): replay(s.row, gate, trigger="host") for s in searches}
    answered = [s for s in answerable if host[id(s)].decision.answered]
    return {
        "answerable": len(answerable), "unanswerable": len(unanswerable),
        "tool_answered_empty": ratio([float(not tool[id(s)].decision.answered) for s in answerable]),
        "tool_recall_at_5": ratio([s.hits(tool[id(s)].kept, 5) for s in answerable]),
        "tool_abstained": ratio([float(not tool[id(s)].decision.answered) for s in unanswerable]),
        "host_abstained": ratio([float(not host[id(s)].decision.answered) for s in unanswerable]),
        "host_answered": ratio([float(host[id(s)].decision.answered) for s in answerable]),
        "host_right_at_1": ratio([s.hits(host[id(s)].kept, 1) for s in answered]),
        **{f"host_{name}": value for name, value in injected(searches, gate, host_k).items()},
    }


def fit(own: list[Search], lme: list[Search], start: GateConfig, host_k: int,
        say: Callable[[str], None] = print) -> GateConfig:
    """Every step in order; ``start`` gives the model name the result keeps."""
    half_a = [s for s in own if s.set == "A"]
    lme_tool = [s for s in lme if s.trigger == "tool"]
    groups = [half_a, lme_tool]
    weights, bias = fit_weights(groups)
    fitted = {n: round(float(w), 3) for n, w in zip(SIGNAL_NAMES, weights, strict=True)}
    gate = replace(start, weights=SignalWeights(**fitted),
                   bias=round(bias, 3), tail_fraction=PerTrigger(0.0, 0.0))
    say(f"weights {gate.weights}, bias {gate.bias}")
    gate = replace(gate, answer_at=PerTrigger(tool_threshold(groups, gate), host_threshold(groups, gate)))
    say(f"answer at {gate.answer_at}")
    tails = PerTrigger(tool_tail_fraction(groups, gate, TOOL_K), host_tail_fraction(groups, gate, host_k))
    say(f"tail fractions {tails}")
    return replace(gate, tail_fraction=tails)


def split_check(own: list[Search], lme: list[Search], start: GateConfig, host_k: int) -> list[dict[str, Any]]:
    """How far a fit carries to questions it did not see: fitted on half A and one half of
    LongMemEval dev, checked on the other half beside the gate fitted on all of it. A fit on
    60 questions moves more with its sample than one on 120, so the gap bounds, rather than
    equals, what the shipped gate loses on public questions outside the split."""
    def on(searches: list[Search], gate: GateConfig) -> dict[str, Any]:
        return {**check(searches, gate, host_k),
                "tool_recall_at_10": round(_recall(searches, gate, "tool", 10), 4)}
    rows = []
    for half in (0, 1):
        gate = fit(own, [s for s in lme if s.half == half], start, host_k, say=lambda _: None)
        unseen = [s for s in lme if s.half != half and s.trigger == "tool"]
        rows.append({"fitted_on": half, "answer_at": to_plain(gate.answer_at),
                     "tail_fraction": to_plain(gate.tail_fraction),
                     "held_out": on(unseen, gate), "all_fitted": on(unseen, start)})
    return rows


def _rrf_order(row: dict[str, Any], k: int = 60) -> list[str]:
    """The same channels a search logged, fused by reciprocal rank instead of by weight."""
    lists = [[d["id"] for d in json.loads(row["dense"])],
             [h["id"] for h in json.loads(row["lexical"])["hits"]],
             list(dict.fromkeys(e["id"] for e in json.loads(row["entity"])))]
    score: dict[str, float] = {}
    for ranking in lists:
        for rank, rid in enumerate(ranking, 1):
            score[rid] = score.get(rid, 0.0) + 1.0 / (k + rank)
    return sorted(score, key=lambda rid: -score[rid])


def fusion_comparison(groups: dict[str, Sequence[Search]]) -> list[dict[str, Any]]:
    """Recall at 5 and 10 of the weighted fusion (every gate step off) against RRF over the
    same logged channels, per set: how the order was chosen (docs/decisions.md)."""
    open_gate = GateConfig(answer_at=PerTrigger(0.0, 0.0), tail_fraction=PerTrigger(0.0, 0.0))
    rows = []
    for name, searches in groups.items():
        answerable = [s for s in searches if s.answerable]
        weighted = [replay(s.row, open_gate).kept for s in answerable]
        rrf = [_rrf_order(s.row) for s in answerable]
        rows.append({"set": name, "n": len(answerable), **{
            f"{label}_at_{k}": round(float(np.mean([s.hits(order, k) for s, order in
                                                    zip(answerable, orders, strict=True)])), 4)
            for label, orders in (("weighted", weighted), ("rrf", rrf)) for k in (5, 10)}})
    return rows


def _max_share(scores: Sequence[float], floor: float | None) -> list[float]:
    """Each score as a share of the channel's best (no floor at the channel's worst)."""
    high = max(scores, default=0.0)
    return [max(0.0, s / high) if high > 1e-12 else 1.0 for s in scores]


def _three_sigma(scores: Sequence[float], floor: float | None) -> list[float]:
    """Each score placed between the list's mean minus and plus three deviations."""
    if not scores:
        return []
    mean, spread = float(np.mean(scores)), float(np.std(scores))
    if spread <= 1e-12:
        return [1.0] * len(scores)
    return [min(1.0, max(0.0, (s - mean + 3 * spread) / (6 * spread))) for s in scores]


def _rank_share(scores: Sequence[float], floor: float | None) -> list[float]:
    """Each score by its rank alone: 1 for the best, falling evenly to the list's end."""
    order = sorted(range(len(scores)), key=lambda i: -scores[i])
    shares = [0.0] * len(scores)
    for rank, i in enumerate(order):
        shares[i] = 1.0 - rank / len(scores)
    return shares


def _listed_floor(scores: Sequence[float], floor: float | None) -> list[float]:
    """Min-max above a floor: being listed by the channel at all is worth 0.3 of its weight,
    between min-max (no floor) and RRF, which rewards two channels agreeing on a record
    whatever its rank."""
    return [0.3 + 0.7 * s for s in scaled(scores, floor)]


def _from_last_candidate(scores: Sequence[float], floor: float | None) -> list[float]:
    """Min-max from the channel's last candidate where it listed a full page, the zero
    before ``retrieval.fusion.zero_rank`` moved it further down."""
    full = len(scores) >= RetrievalConfig().per_generator_k
    return scaled(scores, min(scores) if full else None)


# The within-search scalings the shipped one (min-max) was chosen against.
SCALES: dict[str, Scale] = {"min-max (shipped)": scaled,
                            "min-max from the last candidate": _from_last_candidate,
                            "share of best": _max_share,
                            "mean +- 3 sd": _three_sigma, "rank only": _rank_share,
                            "min-max, listed floor 0.3": _listed_floor}


def scaling_comparison(groups: dict[str, Sequence[Search]]) -> list[dict[str, Any]]:
    """Recall at 1, 5 and 10 with every gate step off under each scaling of the channels'
    scores, beside RRF over the same logged channels."""
    open_gate = GateConfig(answer_at=PerTrigger(0.0, 0.0), tail_fraction=PerTrigger(0.0, 0.0))
    rows = []
    for name, searches in groups.items():
        answerable = [s for s in searches if s.answerable]
        orders = {label: [replay(s.row, open_gate, scale=scale).kept for s in answerable]
                  for label, scale in SCALES.items()}
        orders["RRF"] = [_rrf_order(s.row) for s in answerable]
        for label, ranked in orders.items():
            pairs = list(zip(answerable, ranked, strict=True))
            rows.append({"set": name, "scaling": label, "n": len(answerable), **{
                f"at_{k}": round(float(np.mean([s.hits(o, k) for s, o in pairs])), 4) for k in (1, 5, 10)}})
    return rows


def tradeoff(gate: GateConfig, unseen: Sequence[Search], lme: Sequence[Search]) -> list[dict[str, Any]]:
    """What other tool thresholds would cost: LongMemEval empties, unseen-wordings recall
    and abstention, each threshold with the fitted score."""
    rows = []
    for t in sorted({*TRADEOFF_GRID, gate.answer_at.tool}):
        at = replace(gate, answer_at=replace(gate.answer_at, tool=t))
        u, m = check(unseen, at, 1), check(lme, at, 1)
        rows.append({"tool_threshold": t, "lme_answered_empty": m["tool_answered_empty"],
                     "lme_any_at_5": m["tool_recall_at_5"], "unseen_recall_at_5": u["tool_recall_at_5"],
                     "unseen_abstained": u["tool_abstained"]})
    return rows


def host_tail_tradeoff(gate: GateConfig, unseen: Sequence[Search], lme: Sequence[Search],
                       host_k: int) -> list[dict[str, Any]]:
    """What other host-issued tail fractions would inject, on the unseen wordings and on
    LongMemEval, each with the fitted score (:func:`injected`)."""
    return [{"host_tail": t, "unseen": injected(unseen, _with_tail(gate, "host", t), host_k),
             "lme": injected(lme, _with_tail(gate, "host", t), host_k)}
            for t in sorted({*HOST_TAIL_TRADEOFF, gate.tail_fraction.host})]


# -- writing the defaults ---------------------------------------------------------------

def _yaml_values(gate: GateConfig) -> list[tuple[str, str]]:
    """(dotted key under retrieval.gate, value text) for every fitted value."""
    out = [(f"weights.{n}", f"{getattr(gate.weights, n)}") for n in SIGNAL_NAMES]
    out.append(("bias", f"{gate.bias}"))
    out += [(f"answer_at.{t}", f"{getattr(gate.answer_at, t):.2f}") for t in ("tool", "host")]
    out += [(f"tail_fraction.{t}", f"{getattr(gate.tail_fraction, t):.2f}") for t in ("tool", "host")]
    return out


def write_yaml(path: Path, gate: GateConfig) -> None:
    """Set each fitted value in the file's ``retrieval.gate`` block, comments kept."""
    lines = path.read_text().splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if re.match(r"^  gate:", line))
    for dotted, value in _yaml_values(gate):
        parent, key = dotted.rsplit(".", 1) if "." in dotted else ("", dotted)
        at = start
        if parent:
            at = next(i for i in range(start, len(lines)) if re.match(rf"^    {parent}:", lines[i]))
        indent = "      " if parent else "    "
        i = next(i for i in range(at + 1, len(lines)) if re.match(rf"^{indent}{key}:", lines[i]))
        old = lines[i]
        head = f"{indent}{key}: {value}"
        comment = old.find("#")
        lines[i] = (head.ljust(comment) + old[comment:]) if comment > len(head) else head + "\n"
    path.write_text("".join(lines))


def write_dataclass(path: Path, gate: GateConfig) -> None:
    """The same values as the defaults of ``GateConfig``."""
    text = path.read_text()
    weights = "\n        " + ", ".join(f"{n}={getattr(gate.weights, n)}" for n in SIGNAL_NAMES)
    text = re.sub(r"(    weights: SignalWeights = field\(default_factory=lambda: SignalWeights\()[^)]*(\)\))",
                  rf"\g<1>{weights}\g<2>", text)
    text = re.sub(r"(    bias: float = )[-0-9.e]+", rf"\g<1>{gate.bias}", text)
    for name in ("answer_at", "tail_fraction"):
        value = getattr(gate, name)
        text = re.sub(rf"(    {name}: PerTrigger = field\(default_factory=lambda: PerTrigger\()[^)]*(\)\))",
                      rf"\g<1>tool={round(value.tool, 2)}, host={round(value.host, 2)}\g<2>", text)
    path.write_text(text)


# -- the run ----------------------------------------------------------------------------

def _table(report: dict[str, Any]) -> list[list[str]]:
    rows = [["set", "answerable / unanswerable", "tool: answered empty / R@5 / abstained",
             "host: abstained / answered / right@1 / records / precision"]]
    for name, figs in report["checks"].items():
        def f(v: Any) -> str:
            return "-" if v is None else f"{v:.3f}"
        rows.append([name, f"{figs['answerable']} / {figs['unanswerable']}",
                     " / ".join(f(figs[k]) for k in ("tool_answered_empty", "tool_recall_at_5",
                                                      "tool_abstained")),
                     " / ".join(f(figs[k]) for k in ("host_abstained", "host_answered", "host_right_at_1",
                                                      "host_records", "host_precision"))])
    for t in report["tradeoff"]:
        mark = " (fitted)" if t["tool_threshold"] == report["fitted"]["answer_at"]["tool"] else ""
        rows.append([f"tool threshold {t['tool_threshold']:.2f}{mark}", "",
                     f"LongMemEval: {t['lme_answered_empty']:.3f} / {t['lme_any_at_5']:.3f} / -",
                     f"unseen: R@5 {t['unseen_recall_at_5']:.3f}, abstained {t['unseen_abstained']:.3f}"])
    for t in report["host_tail_tradeoff"]:
        mark = " (fitted)" if t["host_tail"] == report["fitted"]["tail_fraction"]["host"] else ""
        u, m = t["unseen"], t["lme"]
        rows.append([f"host tail {t['host_tail']:.2f}{mark}", "", "records / precision / recall at host_k",
                     f"unseen: {u['records']:.2f} / {u['precision']:.3f} / {u['recall']:.3f}; "
                     f"LongMemEval: {m['records']:.2f} / {m['precision']:.3f} / {m['recall']:.3f}"])
    def split(figs: dict[str, Any]) -> str:
        return (f"empty {figs['tool_answered_empty']:.3f}, R@5 {figs['tool_recall_at_5']:.3f}, "
                f"R@10 {figs['tool_recall_at_10']:.3f}, "
                f"negatives abstained (host) {figs['host_abstained']:.3f}")
    for v in report["split"]:
        rows.append([f"LongMemEval half {1 - v['fitted_on']}, fitted on half {v['fitted_on']} "
                     f"(tool at {v['answer_at']['tool']:.2f}, tail {v['tail_fraction']['tool']:.2f})",
                     str(v["held_out"]["answerable"]), f"held out: {split(v['held_out'])}",
                     f"fitted on all: {split(v['all_fitted'])}"])
    for v in report["scaling"]:
        rows.append([f"scaling: {v['set']}, {v['scaling']}", str(v["n"]),
                     f"R@1 / R@5 / R@10: {v['at_1']:.3f} / {v['at_5']:.3f} / {v['at_10']:.3f}", ""])
    for f in report["fusion"]:
        rows.append([f"fusion: {f['set']}", str(f["n"]),
                     f"weighted R@5 / R@10: {f['weighted_at_5']:.3f} / {f['weighted_at_10']:.3f}",
                     f"RRF R@5 / R@10: {f['rrf_at_5']:.3f} / {f['rrf_at_10']:.3f}"])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--own-dump", type=Path, default=None, help="retrieval_bench --dump output")
    parser.add_argument("--lme-dump", type=Path, default=None, help="longmemeval_bench --all --dump output")
    parser.add_argument("--config", type=Path, default=None, help="the config the dumps ran under")
    parser.add_argument("--write-defaults", action="store_true", help="write the fitted values")
    parser.add_argument("--no-report", action="store_true", help="do not write benchmarks/results")
    args = parser.parse_args()
    config = load_config(args.config)
    with tempfile.TemporaryDirectory() as tmp:
        own_path = args.own_dump or Path(tmp) / "own.json"
        if args.own_dump is None:
            data = json.loads(retrieval_bench.DATA.read_text())["conversations"]
            _, logged, rt = retrieval_bench.run(data, Path(tmp) / "memory.sqlite", config_file=args.config,
                                                unseen=retrieval_bench.unseen_questions(len(data)))
            rt.close()
            own_path.write_text(json.dumps(logged))
        lme_path = args.lme_dump or Path(tmp) / "lme.json"
        if args.lme_dump is None:
            questions = longmemeval_bench.load_questions(longmemeval_bench.data_path())
            _, _, dumped = longmemeval_bench.run_all(questions, None, args.config)
            lme_path.write_text(json.dumps(dumped))
        own = own_searches(json.loads(own_path.read_text()))
        lme = lme_searches(json.loads(lme_path.read_text()))
        hand = hand_searches(Path(tmp) / "hand.sqlite", args.config)
    host_k = config.retrieval.trigger.host_k
    gate = fit(own, lme, config.retrieval.gate, host_k)
    sets = {"A (fits)": [s for s in own if s.set == "A"], "B": [s for s in own if s.set == "B"],
            "unseen wordings": [s for s in own if s.set == "U"],
            "LongMemEval dev (fits)": [s for s in lme if s.trigger == "tool"],
            "hand-labelled (ordinary turns count as unanswerable)": hand}
    report = {"machine": machine(), "model": config.retrieval.gate.calibrated_for,
              "config": str(args.config or "defaults"), "fitted": to_plain(gate),
              "shipped": to_plain(config.retrieval.gate),
              "checks": {name: check(group, gate, host_k) for name, group in sets.items()},
              "checks_shipped": {name: check(group, config.retrieval.gate, host_k)
                                 for name, group in sets.items()},
              "tradeoff": tradeoff(gate, sets["unseen wordings"], sets["LongMemEval dev (fits)"]),
              "split": split_check(own, lme, gate, host_k),
              "host_tail_tradeoff": host_tail_tradeoff(gate, sets["unseen wordings"],
                                                       sets["LongMemEval dev (fits)"], host_k),
              "scaling": scaling_comparison({"LongMemEval dev": sets["LongMemEval dev (fits)"],
                                             "unseen wordings": sets["unseen wordings"]}),
              "fusion": fusion_comparison({
                  "LongMemEval dev": sets["LongMemEval dev (fits)"],
                  "unseen wordings": sets["unseen wordings"],
                  "unseen wordings, wrong speaker": [s for s in sets["unseen wordings"]
                                                     if s.kind == "wrong_speaker"],
                  "unseen wordings, multi-hop": [s for s in sets["unseen wordings"] if s.kind == "multi_hop"],
                  "half A": sets["A (fits)"]})}
    for row in _table(report):
        print(" | ".join(row))
    if not args.no_report:
        write_report(report_name("gate_fit", args.config), report, _table(report),
                     notes=(f"Fitted for {report['model']}: weights {gate.weights}, bias {gate.bias}, "
                            f"answer at {gate.answer_at}, tail fractions {gate.tail_fraction}. Fit on half A "
                            "of the conversational set and LongMemEval-S dev; B and the unseen "
                            "wordings check."))
    if args.write_defaults:
        if args.config is None:
            write_yaml(ROOT / "config.yaml", gate)
            write_dataclass(ROOT / "retold" / "config" / "retrieval.py", gate)
        else:
            write_yaml(args.config, gate)
        print("wrote the fitted values")


if __name__ == "__main__":
    main()
