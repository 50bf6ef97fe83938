"""Activation benchmark: is the profile right, small and cheap?

1. The labelled set (benchmarks/data/activation.json, 241 candidates for five users) is
   played through the real write path: each candidate's words become a turn of the
   user's session (or of the assistant or a tool), then ``memory_write`` stores it and the
   activation policy judges it, as in production. Near-duplicates reinforce their first
   statement (the fake judge is told they are the same claim); superseded pairs replace
   the old value. At the end a candidate counts as promoted when its record is live and
   ambient. Reported: precision and recall of ``ambient`` against the labels (all, and the
   29 held-out candidates written after the rules last changed), the sensitive and
   inferred candidates promoted (target: none), and every miss with the rule that decided
   it.
2. Each user's next session gets its profile block: tokens p50 and max.
3. A store of 10,000 records in the reader's scope (every one judged; a fifth of them
   superseded history, 300 of the live ones ambient) times ``ProfileAssembler.assemble``
   (target p50 <= 5 ms) and ``for_session`` (assemble and store with the session).

The fake embedder and judge stand in for the models: activation reads no vectors.

Run: ``.venv/bin/python -m benchmarks.activation_bench [--records 10000] [--repeats 200]``.
Writes benchmarks/results/activation.json and activation.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from benchmarks.report import machine, pin_threads, summarize, write_report

pin_threads()

from retold import build_runtime, load_config  # noqa: E402
from retold.clock import new_id  # noqa: E402
from retold.models import Principal, Scope  # noqa: E402
from retold.runtime import Runtime  # noqa: E402
from retold.store import NewEvent  # noqa: E402
from retold.testing import T0, FakeEmbedder, FakeJudge, InProcessScheduler, ManualClock, make_record  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "benchmarks" / "data" / "activation.json"
AGENT = "bench-agent"
TARGETS = {"precision": 0.95, "recall": 0.80, "assembly_p50_ms": 5.0}


def _runtime(folder: Path, judge: FakeJudge, clock: ManualClock) -> Runtime:
    embedder = FakeEmbedder()
    config = load_config(overrides={
        "store": {"path": str(folder / "memory.sqlite")},
        "embedding": {"model": "fake", "version": embedder.version, "dims": embedder.dims}})
    return build_runtime(config, clock=clock, embedder=embedder, judge=judge,
                         scheduler=InProcessScheduler(), environ={})


def play(data: dict[str, Any], folder: Path) -> tuple[dict[str, Any], list[int]]:
    """Write every candidate through memory_write; return the scores and profile sizes."""
    rows = data["candidates"]
    by_key = {row["key"]: row for row in rows}
    same = {(by_key[r["same_as"]]["content"], r["content"]): "same" for r in rows if "same_as" in r}
    clock = ManualClock(T0)
    rt = _runtime(folder, FakeJudge(same), clock)
    project = data["project"]
    rt.host.grant(AGENT, Scope("project", project), read=True, write=True)
    principals = {}
    for user, name in data["users"].items():
        rt.host.grant(AGENT, Scope("user", user), read=True, write=True)
        rt.host.provision_user(user, aliases=[name])
        principals[user] = Principal(AGENT, user, f"{user}-1", project)
        rt.hooks.on_session_start(principals[user])
    rt.store.create_entity("project", "Apollo", Scope("project", project), status="confirmed")
    record_of: dict[str, str] = {}
    for row in rows:
        clock.advance(minutes=1)
        principal = principals[row["user"]]
        principals[row["user"]] = principal = rt.hooks.on_turn(principal, row["speaker"], row["says"])
        payload = {"type": row["type"], "content": row["content"], "attribute": row["attribute"],
                   "source_kind": row["source_kind"]}
        if "evidence" in row:
            payload["evidence"] = row["evidence"]
        if "target" in row:
            payload["write_target"] = row["target"]
        if "about" in row:
            payload["entities"] = [{"kind": row["about"][0], "name": row["about"][1], "role": "about"}]
        result = rt.tools.call("memory_write", principal, payload)
        if "error" in result:
            raise SystemExit(f"{row['key']}: {result['error']}")
        record_of[row["key"]] = result["record_id"]
    scores = _score(rt, rows, record_of)
    # Written after the first run's fixes and never used to change a rule: reported apart.
    scores["holdout"] = {k: v for k, v in _score(rt, [r for r in rows if r.get("split") == "holdout"],
                                                 record_of).items() if k != "accuracy_by_kind"}
    tokens = []
    for user in data["users"]:
        nxt = Principal(AGENT, user, f"{user}-2", project)
        rt.hooks.on_session_start(nxt)
        block = rt.profiles.for_session(nxt)
        lines = block.text.splitlines()
        assert len(lines) == len(set(lines)), f"{user}: a profile line repeats"
        tokens.append(block.tokens)
    rt.close()
    return scores, tokens


def _score(rt: Runtime, rows: list[dict[str, Any]], record_of: dict[str, str]) -> dict[str, Any]:
    now = rt.clock.now()
    tp = fp = fn = tn = 0
    misses = []
    by_kind: Counter[str] = Counter()
    right_by_kind: Counter[str] = Counter()
    promoted_forbidden = {"sensitive": 0, "inferred": 0}
    for row in rows:
        record = rt.store.get_record(record_of[row["key"]])
        assert record is not None
        row_state = rt.store.activation_of(record.id)
        live = record.status in ("provisional", "confirmed") and (
            record.expires_at is None or record.expires_at >= now)
        predicted = live and row_state is not None and row_state.activation == "ambient"
        expected = bool(row["ambient"])
        tp += predicted and expected
        fp += predicted and not expected
        fn += expected and not predicted
        tn += not predicted and not expected
        by_kind[row["kind"]] += 1
        right_by_kind[row["kind"]] += predicted == expected
        if predicted and row["kind"] == "sensitive":
            promoted_forbidden["sensitive"] += 1
        if predicted and row["source_kind"] != "user_statement" or predicted and row["kind"] == "unverified":
            promoted_forbidden["inferred"] += 1
        if predicted != expected:
            misses.append({"key": row["key"], "kind": row["kind"], "content": row["content"],
                           "expected": "ambient" if expected else "not ambient",
                           "got": row_state.activation if row_state else "conditional",
                           "rule": row_state.rule if row_state else None, "status": record.status})
    precision = tp / (tp + fp) if tp + fp else 1.0
    recall = tp / (tp + fn) if tp + fn else 1.0
    return {"candidates": len(rows), "tp": tp, "fp": fp, "fn": fn, "tn": tn,
            "precision": round(precision, 4), "recall": round(recall, 4),
            "promoted_forbidden": promoted_forbidden,
            "accuracy_by_kind": {k: f"{right_by_kind[k]}/{n}" for k, n in sorted(by_kind.items())},
            "misses": misses}


def assembly(folder: Path, n: int, repeats: int) -> dict[str, Any]:
    """Time the profile over a reader who sees ``n`` judged live records."""
    clock = ManualClock(T0)
    rt = _runtime(folder, FakeJudge(), clock)
    user = "aditya"
    rt.host.grant(AGENT, Scope("user", user), read=True, write=True)
    me = rt.host.provision_user(user, aliases=["Aditya"])
    categories = ["communication", "diet", "tools", "identity", "work", "location", "health", "schedule"]
    ambient = 0
    for start in range(0, n, 2000):
        with rt.store.atomic():
            for i in range(start, min(n, start + 2000)):
                # Every fifth record is history (superseded), as in a store that has lived a while.
                history = i % 5 == 4
                record = make_record(id=new_id(), scope=Scope("user", user), subject_entity_id=me.id,
                                     attribute=f"attr_{i}", subject=f"{me.id}/attr_{i}",
                                     status="superseded" if history else "confirmed",
                                     content=f"Aditya's preference number {i} about {categories[i % 8]}.")
                rt.store.write_record(record)
                promote = not history and i % (n // 400 or 1) == 0 and ambient < 300
                ambient += promote
                rt.store.set_activation(record.id, "ambient" if promote else "conditional", rule="bench",
                                        reason="bench", category=categories[i % 8], decided_by="policy",
                                        event=NewEvent("record.activation", "bench", {}, record.id))
    principal = Principal(AGENT, user, "bench-0")
    rt.hooks.on_session_start(principal)
    block = rt.profiles.assemble(principal)
    assemble_ms, stored_ms = [], []
    for i in range(repeats):
        start = time.perf_counter()
        rt.profiles.assemble(principal)
        assemble_ms.append((time.perf_counter() - start) * 1000)
        session = Principal(AGENT, user, f"bench-{i + 1}")
        rt.hooks.on_session_start(session)
        start = time.perf_counter()
        rt.profiles.for_session(session)
        stored_ms.append((time.perf_counter() - start) * 1000)
    rt.close()
    return {"records": n, "ambient": ambient, "shown": len(block.record_ids), "omitted": block.omitted,
            "tokens": block.tokens, "assemble_ms": summarize(assemble_ms),
            "for_session_ms": summarize(stored_ms)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--out", type=Path, default=None, help="results folder (default benchmarks/results)")
    args = parser.parse_args()
    data = json.loads(DATA.read_text("utf-8"))
    with tempfile.TemporaryDirectory() as tmp:
        scores, tokens = play(data, Path(tmp) / "labelled")
        timing = assembly(Path(tmp) / "large", args.records, args.repeats)
    result = {"machine": machine(), "targets": TARGETS, "labelled": scores,
              "profile_tokens": {"p50": statistics.median(tokens), "max": max(tokens), "per_user": tokens},
              "assembly": timing}
    forbidden = scores["promoted_forbidden"]
    table = [["measure", "value", "target"],
             ["precision of ambient (all / held out)",
              f"{scores['precision']:.3f} / {scores['holdout']['precision']:.3f}",
              f">= {TARGETS['precision']}"],
             ["recall of ambient (all / held out)",
              f"{scores['recall']:.3f} / {scores['holdout']['recall']:.3f}", f">= {TARGETS['recall']}"],
             ["sensitive promoted", str(forbidden["sensitive"]), "0"],
             ["inferred promoted", str(forbidden["inferred"]), "0"],
             ["profile tokens p50 / max", f"{statistics.median(tokens)} / {max(tokens)}", "<= 300 (cap)"],
             [f"assemble p50 / p95 at {timing['records']:,} records (ms)",
              f"{timing['assemble_ms']['p50']:.2f} / {timing['assemble_ms']['p95']:.2f}",
              f"p50 <= {TARGETS['assembly_p50_ms']}"],
             ["assemble and store p50 / p95 (ms)",
              f"{timing['for_session_ms']['p50']:.2f} / {timing['for_session_ms']['p95']:.2f}", "-"]]
    misses = "; ".join(f"{m['key']} ({m['kind']}, {m['rule']}): {m['content']}" for m in scores["misses"])
    notes = (f"{scores['candidates']} labelled candidates written through memory_write (tp {scores['tp']}, "
             f"fp {scores['fp']}, fn {scores['fn']}, tn {scores['tn']}); accuracy by kind "
             f"{json.dumps(scores['accuracy_by_kind'])}. Misses: {misses or 'none'}. Timing: "
             f"{timing['records']:,} judged records in the reader's scope (a fifth superseded), "
             f"{timing['ambient']} ambient, {args.repeats} repeats.")
    write_report("activation", result, table, notes, args.out or Path(__file__).resolve().parent / "results")
    print(json.dumps({k: result[k] for k in ("profile_tokens",)} | {"precision": scores["precision"],
                      "recall": scores["recall"], "forbidden": forbidden, "assembly": timing}, indent=1))
    for miss in scores["misses"]:
        print("miss:", miss)


if __name__ == "__main__":
    main()
