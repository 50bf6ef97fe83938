"""Gate calibration for the configured embedder (sweeping the gate floors).

Loads the hand-labelled set in benchmarks/data/calibration.json into a fresh store
through the real write path (real all-MiniLM-L6-v2, exact judge), runs every query once
through the real retriever, then sweeps the per-type dense floors and the relative floor
OFFLINE from the logged candidate scores (the same decision as ``replay_gate``), and picks
the values that maximise F1 on classes 1-2 (evidence present / absent) subject to an
injection rate <= 10% on class 3 (ordinary turns). The chosen floors are checked against
``replay_gate`` on every logged search.

Run: ``.venv/bin/python -m benchmarks.calibrate_gate [--model M --version V --dims N]
[--write-defaults]``. ``--model``/``--version``/``--dims`` calibrate another embedding
(what ``retold reembed`` asks for before it switches models). Writes
benchmarks/results/calibration.json and calibration.md; ``--write-defaults`` also writes
the chosen floors into config.yaml and the defaults in retold/config.py.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import tempfile
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]

from benchmarks.report import machine, pin_threads, write_report  # noqa: E402

pin_threads()

import numpy as np  # noqa: E402

from retold import build_runtime, load_config  # noqa: E402
from retold.config import DenseFloors  # noqa: E402
from retold.ingest.equivalence import ExactJudge  # noqa: E402
from retold.ingest.ingestor import WriteRequest  # noqa: E402
from retold.models import EntityMention, Principal, Scope, SearchRequest  # noqa: E402
from retold.retrieve.gate import GateFloors, floors_for, replay_gate  # noqa: E402

AGENT = "research-agent"
DATA = ROOT / "benchmarks" / "data" / "calibration.json"
MAX_INJECTION = 0.10
TYPES = ("semantic", "episodic", "procedural")
GRID = [round(x, 2) for x in np.arange(0.30, 0.801, 0.05)]
# Capped at 0.95: RRF scores of ranks 1 and 5 in one list differ by under 7%, so a higher
# relative floor keeps only the single best record per channel group, which the labelled
# set (91% single-answer questions) would reward but multi-record answers would not.
RELATIVE = [0.0, 0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95]


def build(store_path: Path, data: dict, embedding: dict[str, object] | None = None,
          ) -> tuple[object, dict[str, str]]:
    """Write every record through the ingestor; return the runtime and key -> record id.
    ``embedding`` overrides the embedding block (another model, version or width)."""
    config = load_config(overrides={"store": {"path": str(store_path)},
                                    "embedding": {"torch_threads": 1, **(embedding or {})}})
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
        principal = Principal(AGENT, rec["user"], None, None)
        mentions = [EntityMention(k, n, "mentions") for k, n in rec["mentions"]]
        if rec["about"]:
            mentions.insert(0, EntityMention(rec["about"][0], rec["about"][1], "about"))
        result = rt.ingestor.write(principal, WriteRequest(
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
class Logged:
    """One query's logged candidates as arrays, for a fast offline gate."""

    key: str
    cls: str
    expected: frozenset[str]
    ids: list[str]
    score: np.ndarray
    dense: np.ndarray  # nan: no dense hit
    type_index: np.ndarray
    lexical_pass: np.ndarray  # lexical step-1 pass under the (fixed) lexical floors
    entity: np.ndarray
    channels: np.ndarray


def to_logged(row: dict, query: dict, keys: dict[str, str], floors: GateFloors) -> Logged:
    fused = json.loads(row["fused"])
    multipliers = dict(json.loads(row["freshness"]))
    dense = {rid: cos for rid, _, cos in json.loads(row["dense"])}
    lexical = {r[0]: r for r in json.loads(row["lexical"])}
    entity = {rid for rid, _, _ in json.loads(row["entity"])}
    fused.sort(key=lambda f: -(f[2] * (multipliers.get(f[0]) or 1.0)))
    out_ids, score, dvals, tidx, lpass, ent, chans = [], [], [], [], [], [], []
    for rid, _rank, rrf, type_, _source in fused:
        out_ids.append(keys.get(rid, rid))
        score.append(rrf * (multipliers.get(rid) or 1.0))
        dvals.append(dense.get(rid, np.nan))
        tidx.append(TYPES.index(type_))
        lex = lexical.get(rid)
        ok = False
        if lex is not None and lex[4]:
            matched = len(lex[3])
            precise = any(i or a for _, i, a in lex[3])
            ok = matched / lex[4] >= floors.lexical_min_term_fraction and (
                matched >= floors.lexical_min_matched_terms or precise)
        lpass.append(ok)
        ent.append(rid in entity)
        chans.append((rid in dense) + (lex is not None) + (rid in entity))
    return Logged(query["key"], query["class"], frozenset(query["expected"]), out_ids,
                  np.array(score), np.array(dvals, dtype=float), np.array(tidx, dtype=int),
                  np.array(lpass, dtype=bool), np.array(ent, dtype=bool), np.array(chans, dtype=int))


def decide(q: Logged, dense_floors: np.ndarray, relative: float, k: int) -> list[str]:
    """The gate's floor checks and the k cut, vectorised for the sweep."""
    if not q.ids:
        return []
    with np.errstate(invalid="ignore"):
        dense_ok = q.dense >= dense_floors[q.type_index]
    passed = q.entity | q.lexical_pass | dense_ok
    keep = passed.copy()
    for c in np.unique(q.channels[passed]):
        group = passed & (q.channels == c)
        top = q.score[group].max()
        keep &= ~(group & ~q.entity & (q.score < relative * top))
    return [q.ids[i] for i in np.flatnonzero(keep)[:k]]


def metrics(queries: list[Logged], dense_floors: np.ndarray, relative: float, k: int) -> dict[str, float]:
    tp = fp = fn = injected = ordinary = 0
    for q in queries:
        returned = decide(q, dense_floors, relative, k)
        if q.cls == "ordinary":
            ordinary += 1
            injected += bool(returned)
            continue
        hits = q.expected & set(returned)
        tp += len(hits)
        fp += len(set(returned) - q.expected)
        fn += len(q.expected - hits)
    precision = tp / (tp + fp) if tp + fp else 1.0
    recall = tp / (tp + fn) if tp + fn else 1.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": round(precision, 4), "recall": round(recall, 4), "f1": round(f1, 4),
            "injection_rate": round(injected / ordinary if ordinary else 0.0, 4)}


def sweep(queries: list[Logged], k: int) -> tuple[dict[str, float], np.ndarray, float]:
    best: tuple[float, float, float] | None = None
    chosen = (np.zeros(3), 0.0)
    best_metrics: dict[str, float] = {}
    for floors in itertools.product(GRID, repeat=3):
        arr = np.array(floors)
        for relative in RELATIVE:
            m = metrics(queries, arr, relative, k)
            if m["injection_rate"] > MAX_INJECTION:
                continue
            # Best F1; ties prefer lower injection, then the lower (more permissive) floors.
            key = (m["f1"], -m["injection_rate"], -float(arr.sum()))
            if best is None or key > best:
                best, chosen, best_metrics = key, (arr, relative), m
    return best_metrics, chosen[0], chosen[1]


def write_defaults(dense: np.ndarray, relative: float, session_summary: float) -> None:
    """Write the chosen floors into config.yaml and the retold/config.py defaults."""
    values = dict(zip(TYPES, dense.tolist(), strict=True))
    yaml_path = ROOT / "config.yaml"
    text = yaml_path.read_text()
    block = re.search(r"(  gate:\n    dense_floor:.*?\n)(    relative_floor: )([0-9.]+)", text, re.S)
    assert block is not None, "config.yaml gate block not found"
    head = block.group(1)
    for name, value in values.items():
        head = re.sub(rf"(\n      {name}: )[0-9.]+", rf"\g<1>{value:.2f}", head, count=1)
    text = text[: block.start()] + head + block.group(2) + f"{relative:.2f}" + text[block.end():]
    yaml_path.write_text(text)
    code_path = ROOT / "retold" / "config.py"
    code = code_path.read_text()
    dense_cls = re.search(r"class DenseFloors:.*?\n\n\n", code, re.S)
    assert dense_cls is not None
    body = dense_cls.group(0)
    for name, value in values.items():
        body = re.sub(rf"(\n    {name}: float = )[0-9.]+", rf"\g<1>{value:.2f}", body, count=1)
    code = code[: dense_cls.start()] + body + code[dense_cls.end():]
    gate_cls = re.search(r"class GateConfig:.*?relative_floor: float = ([0-9.]+)", code, re.S)
    assert gate_cls is not None
    code = code[: gate_cls.start(1)] + f"{relative:.2f}" + code[gate_cls.end(1):]
    code_path.write_text(code)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write-defaults", action="store_true",
                        help="write the chosen floors into config.yaml and retold/config.py")
    parser.add_argument("--model", help="embedding model to calibrate (default: embedding.model)")
    parser.add_argument("--version", help="its embedding version tag (default: embedding.version)")
    parser.add_argument("--dims", type=int, help="its vector width (default: embedding.dims)")
    args = parser.parse_args()
    embedding = {key: value for key, value in
                 (("model", args.model), ("version", args.version), ("dims", args.dims))
                 if value is not None}
    data = json.loads(DATA.read_text())
    with tempfile.TemporaryDirectory() as tmp:
        rt, keys = build(Path(tmp) / "calibration.sqlite", data, embedding)
        cfg = rt.config.retrieval  # type: ignore[attr-defined]
        floors = floors_for(cfg.gate, "tool")
        logged, rows = [], []
        for query in data["queries"]:
            principal = Principal(AGENT, query["user"], None, None)
            outcome = rt.retriever.search(principal, SearchRequest(queries=[query["text"]]))  # type: ignore[attr-defined]
            rt.flush_search_log()  # type: ignore[attr-defined]
            row = rt.store.search_log_row(outcome.response.search_id)  # type: ignore[attr-defined]
            rows.append(row)
            logged.append(to_logged(row, query, keys, floors))
        embedder = rt.embedder  # type: ignore[attr-defined]
        rt.close()  # type: ignore[attr-defined]
    k = cfg.default_k
    before_dense = np.array([getattr(cfg.gate.dense_floor, t) for t in TYPES])
    before = metrics(logged, before_dense, cfg.gate.relative_floor, k)
    after, dense, relative = sweep(logged, k)
    # The offline sweep must agree with the gate the retriever runs.
    chosen = replace(floors, dense_floor=DenseFloors(*dense.tolist(),
                                                     session_summary=floors.dense_floor.session_summary),
                     relative_floor=relative)
    for row, q in zip(rows, logged, strict=True):
        replayed = [keys.get(c.record_id, c.record_id) for c in replay_gate(row, chosen).kept][:k]
        assert replayed == decide(q, dense, relative, k), q.key
    spec = {"semantic": 0.45, "episodic": 0.40, "procedural": 0.45, "relative_floor": 0.5}
    chosen_values = {**dict(zip(TYPES, dense.tolist(), strict=True)), "relative_floor": relative}
    results = {"machine": machine(), "model": embedder.name, "embedding_version": embedder.version,
               "records": len(data["records"]), "queries": {c: sum(q.cls == c for q in logged)
                                                             for c in ("present", "absent", "ordinary")},
               "max_injection_rate": MAX_INJECTION, "k": k,
               "before": {"floors": spec, **before}, "after": {"floors": chosen_values, **after},
               "bge_m3_spec_floors": spec}
    table = [["floors", "semantic / episodic / procedural", "relative", "precision", "recall", "F1",
              "injection (class 3)"],
             ["before (spec values)", "0.45 / 0.40 / 0.45", "0.50", f"{before['precision']:.3f}",
              f"{before['recall']:.3f}", f"{before['f1']:.3f}", f"{before['injection_rate']:.3f}"],
             ["after (calibrated)", " / ".join(f"{v:.2f}" for v in dense.tolist()), f"{relative:.2f}",
              f"{after['precision']:.3f}", f"{after['recall']:.3f}", f"{after['f1']:.3f}",
              f"{after['injection_rate']:.3f}"]]
    write_report("calibration", results, table,
                 notes=f"{embedder.name} (embedding.version {embedder.version}); "
                       f"{len(data['records'])} records, {len(logged)} queries; F1 on classes 1-2, "
                       f"injection rate on class 3 <= {MAX_INJECTION:.0%}; k = {k}.")
    for line in table:
        print(" | ".join(line))
    if args.write_defaults:
        write_defaults(dense, relative, floors.dense_floor.session_summary)
        print("wrote the chosen floors into config.yaml and retold/config.py")


if __name__ == "__main__":
    main()
