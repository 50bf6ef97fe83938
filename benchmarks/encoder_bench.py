"""Encoder benchmark: the shipped MiniLM on ONNX Runtime against sentence-transformers.

1. Query embedding on one thread: distinct queries (no cache hits), one per call, the
   backends interleaved in the same run (the order rotates per query), p50/p95 each: ONNX
   Runtime, sentence-transformers and the int8 variant on ONNX Runtime. Also one 64-text
   document batch (``reembed_batch_size``) per backend, interleaved.
2. Agreement: the cosine between each ONNX backend's vectors and sentence-transformers' for
   every query (the int8 variant is a model of its own with its own gate, so its figure
   says how far it moved, not whether stored vectors stay valid).
3. Cold start: a fresh Python process that imports retold, runs ``build_runtime`` and one
   search on a small store, per backend; the ONNX process must not import torch. Timed
   inside the child from before ``import retold``, and by the parent for the whole process
   (interpreter start included).
4. The one-time export of the ONNX file into an empty cache folder, and the int8 file's
   quantisation from it.

Run: ``.venv/bin/python -m benchmarks.encoder_bench [--queries 300] [--cold-runs 5]``.
Writes benchmarks/results/encoder.json and encoder.md.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from benchmarks.report import machine, pin_threads, summarize, write_report  # noqa: E402

pin_threads()

from retold import build_runtime, load_config  # noqa: E402
from retold.index.embedder import DEFAULT_MODEL, INT8_MODEL, SentenceTransformerEmbedder  # noqa: E402
from retold.index.onnx_embedder import OnnxEmbedder  # noqa: E402
from retold.index.onnx_export import ensure_exported  # noqa: E402
from retold.models import Principal, Scope  # noqa: E402

AGENT, USER = "bench-agent", "priya"
SUBJECTS = ["the deploy pipeline", "Priya's editor theme", "the billing service", "ticket ACME-4312",
            "the Atlas launch", "on-call rotation", "the staging database", "Marcus's timezone",
            "the release checklist", "the payments flaky test", "Dana's handover notes",
            "the Q3 budget", "the standup time", "the coffee order", "the VPN outage"]
ASKS = ["What do we know about {}?", "who owns {} now", "When did {} last change?",
        "any decisions recorded about {}", "remind me what the user said about {}",
        "Is there an open issue with {}?", "summarise {} in one line"]
MEMORIES = [f"{s.capitalize()} was discussed: the team agreed to revisit it next sprint." for s in SUBJECTS]

# Runs in a fresh interpreter; the first line starts the clock before retold is imported.
CHILD = f"""\
import time; t0 = time.perf_counter()
import json, sys
import retold
from retold import Principal
imported = time.perf_counter()
rt = retold.build_runtime(retold.load_config(overrides=json.loads(sys.argv[1])))
built = time.perf_counter()
res = rt.tools.call("memory_search", Principal("{AGENT}", "{USER}", "cold", None),
                    {{"queries": ["what did the team agree about the deploy pipeline?"]}})
done = time.perf_counter()
rt.close()
print(json.dumps({{
    "backend": type(rt.embedder).__name__, "results": len(res["results"]),
    "import_ms": (imported - t0) * 1000, "build_ms": (built - imported) * 1000,
    "first_search_ms": (done - built) * 1000, "total_ms": (done - t0) * 1000,
    "torch_imported": "torch" in sys.modules,
    "sentence_transformers_imported": "sentence_transformers" in sys.modules,
}}))
"""


def make_queries(n: int) -> list[str]:
    rng = random.Random(7)
    pairs = [ask.format(subject) for ask in ASKS for subject in SUBJECTS]
    rng.shuffle(pairs)
    # a numbered suffix keeps every query distinct once the templates run out
    return [pairs[i % len(pairs)] + ("" if i < len(pairs) else f" (#{i})") for i in range(n)]


Encoders = dict[str, OnnxEmbedder | SentenceTransformerEmbedder]


def _rotated(encoders: Encoders, i: int) -> list[tuple[str, OnnxEmbedder | SentenceTransformerEmbedder]]:
    """The encoders in an order that rotates with ``i``, so none always runs first or last."""
    items = list(encoders.items())
    shift = i % len(items)
    return items[shift:] + items[:shift]


def bench_queries(encoders: Encoders, queries: list[str]) -> dict[str, Any]:
    times: dict[str, list[float]] = {name: [] for name in encoders}
    cosines: dict[str, list[float]] = {name: [] for name in encoders if name != "sentence_transformers"}
    for i, query in enumerate(queries):
        vectors = {}
        for name, embedder in _rotated(encoders, i):
            started = time.perf_counter()
            vectors[name] = embedder.embed_queries([query])[0]
            times[name].append((time.perf_counter() - started) * 1000)
        for name in cosines:
            cosines[name].append(float(vectors[name] @ vectors["sentence_transformers"]))
    return {
        "query_ms": {name: summarize(samples) for name, samples in times.items()},
        "cosine": {name: {"min": round(min(values), 6), "mean": round(statistics.fmean(values), 6)}
                   for name, values in cosines.items()},
    }


def bench_documents(encoders: Encoders, rounds: int) -> dict[str, Any]:
    docs = [f"{MEMORIES[i % len(MEMORIES)]} Note {i}: " + "details " * (i % 20) for i in range(64)]
    times: dict[str, list[float]] = {name: [] for name in encoders}
    for i in range(rounds):
        for name, embedder in _rotated(encoders, i):
            started = time.perf_counter()
            embedder.embed_documents(docs)
            times[name].append((time.perf_counter() - started) * 1000)
    return {"batch_64_ms": {name: summarize(samples) for name, samples in times.items()}}


def prepare_store(path: Path, cache_dir: str) -> None:
    config = load_config(overrides={"store": {"path": str(path)},
                                    "embedding": {"onnx_cache_dir": cache_dir, "torch_threads": 1},
                                    "ingestion": {"equivalence": {"model": "exact"}}})
    with build_runtime(config) as rt:
        rt.host.grant(AGENT, Scope("user", USER), read=True, write=True)
        principal = Principal(AGENT, USER, "setup", None)
        for i, content in enumerate(MEMORIES):
            out = rt.tools.call("memory_write", principal, {
                "type": "semantic", "source_kind": "agent_inference", "attribute": f"topic_{i}",
                "content": content})
            assert out.get("outcome") == "created", out


def cold_start(path: Path, cache_dir: str, backend: str, runs: int) -> dict[str, Any]:
    overrides = {"store": {"path": str(path)},
                 "embedding": {"backend": backend, "onnx_cache_dir": cache_dir, "torch_threads": 1},
                 "ingestion": {"equivalence": {"model": "exact"}}}
    samples: list[dict[str, Any]] = []
    for _ in range(runs):
        started = time.perf_counter()
        done = subprocess.run([sys.executable, "-c", CHILD, json.dumps(overrides)],
                              capture_output=True, text=True, timeout=300, check=True)
        child = json.loads(done.stdout.strip().splitlines()[-1])
        child["process_ms"] = (time.perf_counter() - started) * 1000
        samples.append(child)
    assert all(s["results"] > 0 for s in samples), samples
    keys = ("import_ms", "build_ms", "first_search_ms", "total_ms", "process_ms")
    return {
        "backend": samples[0]["backend"],
        "torch_imported": any(s["torch_imported"] for s in samples),
        "sentence_transformers_imported": any(s["sentence_transformers_imported"] for s in samples),
        **{key: summarize([s[key] for s in samples]) for key in keys},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--cold-runs", type=int, default=5)
    args = parser.parse_args()
    results: dict[str, Any] = {"machine": machine(), "model": DEFAULT_MODEL, "threads": 1}
    with tempfile.TemporaryDirectory() as tmp:
        cache = str(Path(tmp) / "onnx")
        from retold.config import EmbeddingConfig

        started = time.perf_counter()
        exported = ensure_exported(EmbeddingConfig(onnx_cache_dir=cache))
        results["export_s"] = round(time.perf_counter() - started, 2)
        results["onnx_file_mb"] = round(exported.stat().st_size / 1e6, 1)
        print(f"exported in {results['export_s']} s ({results['onnx_file_mb']} MB)", flush=True)

        started = time.perf_counter()
        ensure_exported(EmbeddingConfig(model=INT8_MODEL, onnx_cache_dir=cache))
        results["quantise_s"] = round(time.perf_counter() - started, 2)

        encoders: Encoders = {
            "onnx": OnnxEmbedder(threads=1, cache_dir=cache, query_cache_entries=0),
            "sentence_transformers": SentenceTransformerEmbedder(torch_threads=1, query_cache_entries=0),
            "onnx_int8": OnnxEmbedder(INT8_MODEL, threads=1, cache_dir=cache, query_cache_entries=0),
        }
        for embedder in encoders.values():  # load and warm each before timing
            embedder.embed_queries(["warm up the encoder", "and once more"])
        results.update(bench_queries(encoders, make_queries(args.queries)))
        results.update(bench_documents(encoders, args.batches))
        print(json.dumps({k: results[k] for k in ("query_ms", "cosine", "batch_64_ms")}), flush=True)

        store = Path(tmp) / "cold.sqlite"
        prepare_store(store, cache)
        results["cold_start"] = {
            "onnx": cold_start(store, cache, "onnx", args.cold_runs),
            "sentence_transformers": cold_start(store, cache, "sentence-transformers", args.cold_runs),
        }
        print(json.dumps(results["cold_start"]), flush=True)
    assert not results["cold_start"]["onnx"]["torch_imported"], "the ONNX process imported torch"

    q, b, c = results["query_ms"], results["batch_64_ms"], results["cold_start"]
    table = [["backend", "query p50 / p95 (ms)", "64-doc batch p50 (ms)",
              "cold: import / build / first search (ms)", "cold total p50 (ms)", "process p50 (ms)",
              "torch imported"]]
    for key, label in (("onnx", "ONNX Runtime"), ("sentence_transformers", "sentence-transformers"),
                       ("onnx_int8", "ONNX Runtime, int8 variant")):
        cold = c.get(key)
        if cold is None:  # its vectors are another family: its cold start is search_int8's
            table.append([label, f"{q[key]['p50']:.2f} / {q[key]['p95']:.2f}", f"{b[key]['p50']:.1f}",
                          "-", "-", "-", "-"])
            continue
        table.append([
            label, f"{q[key]['p50']:.2f} / {q[key]['p95']:.2f}", f"{b[key]['p50']:.1f}",
            f"{cold['import_ms']['p50']:.0f} / {cold['build_ms']['p50']:.0f} / "
            f"{cold['first_search_ms']['p50']:.0f}",
            f"{cold['total_ms']['p50']:.0f}", f"{cold['process_ms']['p50']:.0f}",
            "yes" if cold["torch_imported"] else "no",
        ])
    notes = (
        f"all-MiniLM-L6-v2 on one thread. {args.queries} distinct queries, one per call, no "
        f"query cache, the backends interleaved (order rotating); {args.batches} rounds of one "
        f"64-text document batch. Cosine to sentence-transformers' query vectors: ONNX Runtime min "
        f"{results['cosine']['onnx']['min']}, mean {results['cosine']['onnx']['mean']}; int8 variant "
        f"min {results['cosine']['onnx_int8']['min']}, mean {results['cosine']['onnx_int8']['mean']} "
        f"(a model of its own, with its own fitted gate; its cold start is in search_int8). "
        f"Cold start: a fresh process imports retold, builds the runtime and runs one search on a "
        f"{len(MEMORIES)}-record store ({args.cold_runs} runs each; the ONNX file already "
        f"exported). One-time export into an empty cache: {results['export_s']} s "
        f"({results['onnx_file_mb']} MB); the int8 file quantised from it: {results['quantise_s']} s."
    )
    write_report("encoder", results, table, notes)
    for row in table:
        print(" | ".join(row))


if __name__ == "__main__":
    main()
