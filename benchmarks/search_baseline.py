"""Search-benchmark mode "baseline": Retold's memory_search against a dense-only baseline.

Both sides answer the same distinct query texts, one query per call on one thread,
interleaved in the same run. Two interleavings are run and reported:

- per query (``block=1``): Retold then the baseline, then the baseline first on the next
  query, so neither side always runs after the other;
- in blocks (``block=20``): twenty queries on one side, then the same twenty on the other,
  the first side alternating. Each encoder's weights (about 90 MB for MiniLM in float32)
  outgrow the machine's last-level cache, so per-query alternation makes every query of
  each side start with the other model's weights in the cache; an agent process runs one
  encoder. Blocks still interleave the two sides over the whole run, so drift in machine
  load falls on both alike.

- Retold: ``rt.tools.call("memory_search", ...)`` on the default config (the packaged
  MiniLM on ONNX Runtime) with ``embedding.torch_threads: 1``, timed from the call to its
  return. Its search-log row is written after the timing, so the background writer never
  runs during the baseline's turn.
- Baseline: ``SentenceTransformer(model).encode(query)`` on one torch thread, one numpy
  dot product over every stored vector (the whole store, no scope filter) and an argsort
  for the top ``K``.

Each side's process CPU time (``time.process_time``, every thread: Retold encodes on a
helper thread) is recorded too: on a shared machine wall time grows with whatever else
runs, while CPU time shows what one search costs; the report gives both ratios, and the
target is the wall-clock one.

The store holds the same document vectors the baseline scores (the two encoders agree to
a cosine of 0.9999), and each text is new to the runtime's query cache, so every Retold
search pays for its encoder too.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.report import summarize
from benchmarks.search_data import bench_config, populate, principal
from retold import build_runtime
from retold.index.embedder import DEFAULT_MODEL, resolve_model_path
from retold.ingest.equivalence import ExactJudge

K = 10  # results the baseline ranks, as many as a search returns at most by default


class DenseBaseline:
    """sentence-transformers on one torch thread plus one dot product over a matrix."""

    def __init__(self) -> None:
        import torch
        from sentence_transformers import SentenceTransformer

        torch.set_num_threads(1)
        self.model = SentenceTransformer(resolve_model_path(DEFAULT_MODEL), device="cpu",
                                         local_files_only=True)
        self.model.encode("warm the baseline up")

    def search(self, matrix: np.ndarray, query: str) -> tuple[float, float, float]:
        """(total ms, encode ms, process CPU ms) of one search: encode, score every row,
        take the top K."""
        cpu = time.process_time()
        started = time.perf_counter()
        vector = self.model.encode(query, convert_to_numpy=True, normalize_embeddings=True)
        encoded = time.perf_counter()
        scores = matrix @ vector
        top = np.argsort(-scores)[:K]
        done = time.perf_counter()
        cpu_ms = (time.process_time() - cpu) * 1000
        assert len(top) == min(K, len(matrix))
        return (done - started) * 1000, (encoded - started) * 1000, cpu_ms


def run_baseline(tmp: Path, n: int, records: list[dict[str, Any]], vectors: np.ndarray,
                 texts: list[str], baseline: DenseBaseline, block: int = 1) -> dict[str, Any]:
    """One store size: both sides on every text, interleaved ``block`` queries at a time;
    p50/p95 and the ratio."""
    config = bench_config(tmp / f"baseline_{n}_{block}.sqlite", torch_threads=1)
    with build_runtime(config, judge=ExactJudge()) as rt:
        populate(rt, records, vectors)
    rt = build_runtime(config, judge=ExactJudge())
    backend = type(rt.embedder).__name__
    assert rt.embedder.name == config.embedding.model, rt.embedder.name
    warm = rt.tools.call("memory_search", principal(), {"queries": ["warm up: what does Priya prefer?"]})
    assert "error" not in warm, warm
    matrix = np.ascontiguousarray(vectors[:n], dtype=np.float32)
    retold_ms: list[float] = []
    retold_embed: list[float] = []
    retold_wait: list[float] = []  # what each search waited for its encoder after the reads
    dense_ms: list[float] = []
    retold_cpu: list[float] = []
    dense_cpu: list[float] = []
    dense_embed: list[float] = []
    returned: list[int] = []

    def retold_turn(text: str) -> None:
        cpu = time.process_time()
        started = time.perf_counter()
        result = rt.tools.call("memory_search", principal(), {"queries": [text]})
        retold_ms.append((time.perf_counter() - started) * 1000)
        retold_cpu.append((time.process_time() - cpu) * 1000)
        assert "error" not in result, result
        retold_embed.append(float(result["timings_ms"]["embed"]))
        retold_wait.append(float(result["timings_ms"]["embed_wait"]))
        returned.append(len(result["results"]))
        rt.flush_search_log()

    def dense_turn(text: str) -> None:
        total, embed, cpu_ms = baseline.search(matrix, text)
        dense_ms.append(total)
        dense_embed.append(embed)
        dense_cpu.append(cpu_ms)

    for i in range(0, len(texts), block):
        chunk = texts[i: i + block]
        turns = (retold_turn, dense_turn) if (i // block) % 2 == 0 else (dense_turn, retold_turn)
        for turn in turns:
            for text in chunk:
                turn(text)
    cache_size = getattr(rt.embedder, "cache_size", None)
    rt.close()
    # Every text is distinct, so no search was served from the query cache; the cache holds
    # each text's vector, the warm-up's and the names the questions asked about (encoded
    # the first time a name comes up: part of what Retold's side costs).
    assert len(set(texts)) == len(texts), "the baseline's texts must be distinct"
    assert cache_size is None or cache_size >= len(texts) + 1, (cache_size, len(texts))
    retold_s, dense_s = summarize(retold_ms), summarize(dense_ms)
    return {
        "records": n, "queries": len(texts), "block": block, "retold_backend": backend,
        "retold_ms": retold_s, "dense_ms": dense_s,
        "ratio_p50": round(retold_s["p50"] / dense_s["p50"], 3),
        "ratio_p95": round(retold_s["p95"] / dense_s["p95"], 3),
        "retold_cpu_ms": summarize(retold_cpu), "dense_cpu_ms": summarize(dense_cpu),
        "cpu_ratio_p50": round(float(np.median(retold_cpu) / np.median(dense_cpu)), 3),
        "retold_embed_ms": summarize(retold_embed), "dense_embed_ms": summarize(dense_embed),
        "retold_non_embed_p50_ms": round(float(np.median(np.subtract(retold_ms, retold_wait))), 3),
        "retold_results_mean": round(sum(returned) / len(returned), 2),
        "query_cache_entries_after": cache_size,
    }
