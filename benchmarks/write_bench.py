"""Write-path benchmark (write-path issue): memory_write latency by stage.

Real all-MiniLM-L6-v2 embedder on one torch thread, the exact judge, and stores that
already hold 1K and 10K records (background rows carry random unit vectors, so building
them costs no model time; 50 of them are about the writer, so the attribute scan has
work). For each size it writes 200 distinct memories through ``Ingestor.write`` and, in
the same run, times the bare embedding of the same texts.

Target: write p50 <= embedding p50 + 5 ms at 10K.

Run: ``.venv/bin/python -m benchmarks.write_bench [--sizes 1000,10000] [--writes 200]``.
Writes benchmarks/results/write.json and write.md.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from benchmarks.report import machine, pin_threads, summarize, write_report  # noqa: E402

pin_threads()

import numpy as np  # noqa: E402

from retold import build_runtime, load_config  # noqa: E402
from retold.clock import new_id  # noqa: E402
from retold.ingest.equivalence import ExactJudge  # noqa: E402
from retold.ingest.ingestor import WriteRequest  # noqa: E402
from retold.models import Principal, Scope  # noqa: E402
from retold.runtime import Runtime  # noqa: E402
from retold.testing import make_record  # noqa: E402

AGENT, USER = "bench-agent", "aditya"
STAGES = ["permission", "evidence", "embed", "entities", "dedup_search", "judge", "supersession",
          "persistence", "event_log", "transaction", "index_update", "total"]
TOPICS = ["deploy", "billing", "editor", "timezone", "review", "testing", "release", "oncall",
          "coffee", "language", "framework", "database", "dashboard", "meeting", "travel"]


def populate(rt: Runtime, n: int, rng: np.random.Generator) -> None:
    """Background records across ten users; 50 about the writer's person entity."""
    me = rt.host.provision_user(USER, aliases=["Aditya"])
    vectors = rng.standard_normal((n, rt.embedder.dims)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    for start in range(0, n, 2000):
        with rt.store.atomic():
            for i in range(start, min(n, start + 2000)):
                mine = i < 50
                rec = make_record(
                    id=new_id(), scope=Scope("user", USER if mine else f"user{i % 10}"),
                    content=f"background memory {i} about {TOPICS[i % len(TOPICS)]}",
                    subject_entity_id=me.id if mine else None, attribute=f"attr_{i}",
                    subject=f"{me.id if mine else '-'}/attr_{i}",
                )
                rt.store.write_record(rec)
                rt.store.put_embedding(rec.id, rt.embedder.name, rt.embedder.version, vectors[i])


def texts(count: int) -> list[str]:
    return [f"Aditya prefers {TOPICS[i % len(TOPICS)]} option number {i} for project work."
            for i in range(count)]


def run_size(tmp: Path, n: int, writes: int) -> dict[str, object]:
    config = load_config(overrides={"store": {"path": str(tmp / f"write_{n}.sqlite")},
                                    "embedding": {"torch_threads": 1}})
    rt = build_runtime(config, judge=ExactJudge())
    rt.host.grant(AGENT, Scope("user", USER), read=True, write=True)
    populate(rt, n, np.random.default_rng(n))
    principal = Principal(AGENT, USER, "bench-session", None)
    rt.hooks.on_session_start(principal)
    rt.embedder.embed_documents(["warm up the model"])  # the first call loads it
    rt.refresh_index()
    contents = texts(writes)
    bare = []
    for content in contents:  # the same texts, embedding alone
        started = time.perf_counter()
        rt.embedder.embed_documents([content])
        bare.append((time.perf_counter() - started) * 1000)
    stages: dict[str, list[float]] = {stage: [] for stage in STAGES}
    outcomes: dict[str, int] = {}
    for i, content in enumerate(contents):
        result = rt.ingestor.write(principal, WriteRequest(type="semantic", content=content,
                                                           attribute=f"choice_{i}"))
        assert result.ok, result.note
        outcomes[result.outcome.split(":")[0]] = outcomes.get(result.outcome.split(":")[0], 0) + 1
        for stage in STAGES:
            stages[stage].append(result.timings_ms.get(stage, 0.0))
    rt.close()
    out: dict[str, object] = {"records": n, "writes": writes, "outcomes": outcomes,
                              "embed_only_ms": summarize(bare),
                              "stages_ms": {s: summarize(v) for s, v in stages.items()}}
    total, embed = summarize(stages["total"]), summarize(bare)
    out["total_minus_bare_embed_p50_ms"] = round(total["p50"] - embed["p50"], 3)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000")
    parser.add_argument("--writes", type=int, default=200)
    args = parser.parse_args()
    results: dict[str, object] = {"machine": machine(), "judge": "exact",
                                  "model": "sentence-transformers/all-MiniLM-L6-v2", "sizes": {}}
    table = [["records", "write p50 / p95 (ms)", "bare embed p50 (ms)", "write - embed p50 (ms)",
              "embed / dedup_search / persistence / transaction p50 (ms)"]]
    with tempfile.TemporaryDirectory() as tmp:
        for n in (int(s) for s in args.sizes.split(",")):
            row = run_size(Path(tmp), n, args.writes)
            results["sizes"][str(n)] = row  # type: ignore[index]
            st = row["stages_ms"]
            table.append([
                f"{n:,}", f"{st['total']['p50']:.1f} / {st['total']['p95']:.1f}",  # type: ignore[index]
                f"{row['embed_only_ms']['p50']:.1f}",  # type: ignore[index]
                f"{row['total_minus_bare_embed_p50_ms']:.1f}",
                " / ".join(f"{st[s]['p50']:.2f}" for s in  # type: ignore[index]
                           ("embed", "dedup_search", "persistence", "transaction")),
            ])
            print(" | ".join(table[-1]), flush=True)
    write_report("write", results, table,
                 notes="Target: write p50 <= bare embedding p50 + 5 ms at 10K. Real MiniLM on one "
                       "torch thread, exact judge, 200 distinct writes per size.")


if __name__ == "__main__":
    main()
