"""Operations benchmark: ``retold reembed`` throughput and CLI start-up time.

1. Re-embedding: a store of 10K records (background rows carry random vectors under
   embedding version "1", so building them costs no model time) is re-embedded with the
   real all-MiniLM-L6-v2 on one torch thread under version "2" through
   ``Operations.reembed``, in batches of ``embedding.reembed_batch_size``. Reported:
   records per second, end to end (reading, embedding, writing, dropping the old vectors),
   and the share of that time the model took.
2. Start-up: wall time of ``retold dump --scope user:x --store <file>`` (a model-free
   command, through the installed console script), 10 runs; target median < 1 s.

Run: ``.venv/bin/python -m benchmarks.ops_bench [--records 10000] [--runs 10]``.
Writes benchmarks/results/ops.json and ops.md.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.report import machine, pin_threads, summarize, write_report  # noqa: E402

pin_threads()

import numpy as np  # noqa: E402

from retold import build_runtime, load_config  # noqa: E402
from retold.clock import new_id  # noqa: E402
from retold.models import Scope  # noqa: E402
from retold.testing import make_record  # noqa: E402

MODEL = "sentence-transformers/all-MiniLM-L6-v2"
TOPICS = ["deploy", "billing", "editor", "timezone", "review", "testing", "release", "oncall",
          "coffee", "language", "framework", "database", "dashboard", "meeting", "travel"]


def populate(path: Path, n: int) -> None:
    """``n`` records across twenty users, each with a random version-"1" vector."""
    config = load_config(overrides={"store": {"path": str(path)}, "embedding": {"model": "fake"}})
    rng = np.random.default_rng(n)
    with build_runtime(config) as rt:
        vectors = rng.standard_normal((n, 384)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        for start in range(0, n, 2000):
            with rt.store.atomic():
                for i in range(start, min(n, start + 2000)):
                    topic = TOPICS[i % len(TOPICS)]
                    rec = make_record(
                        id=new_id(), scope=Scope("user", f"user{i % 20}"), attribute=f"attr_{i}",
                        subject=f"-/attr_{i}",
                        content=f"User {i % 20} said that the {topic} work item {i} should wait until "
                                f"the {TOPICS[(i * 7) % len(TOPICS)]} review is finished next week.",
                    )
                    rt.store.write_record(rec)
                    rt.store.put_embedding(rec.id, MODEL, "1", vectors[i])


def bench_reembed(tmp: Path, n: int) -> dict[str, object]:
    path = tmp / "reembed.sqlite"
    populate(path, n)
    # The runtime is configured for the target version, so reembed uses its (warm) embedder;
    # like `retold reembed`, it opens a store that still holds the old family.
    config = load_config(overrides={"store": {"path": str(path)},
                                    "embedding": {"model": MODEL, "version": "2", "torch_threads": 1}})
    with build_runtime(config, allow_embedding_mismatch=True) as rt:
        rt.embedder.embed_documents(["warm up the model"])  # load outside the timing
        model_s = 0.0
        inner = rt.embedder.embed_documents

        def timed(texts: list[str]) -> np.ndarray:
            nonlocal model_s
            started = time.perf_counter()
            out = inner(texts)
            model_s += time.perf_counter() - started
            return out

        ops = rt.operations
        rt.embedder.embed_documents = timed  # type: ignore[method-assign]
        result = ops.reembed(MODEL, "2")
        versions = rt.store.embedding_versions()
    assert result.embedded == n and versions == [(MODEL, "2", n)], versions
    return {
        "records": n, "batch_size": config.embedding.reembed_batch_size, "torch_threads": 1,
        "seconds": round(result.seconds, 2), "records_per_second": round(result.records_per_second, 1),
        "model_seconds": round(model_s, 2), "model_share": round(model_s / result.seconds, 3),
        "batches": result.batches,
    }


def bench_startup(tmp: Path, runs: int) -> dict[str, object]:
    path = tmp / "startup.sqlite"
    populate(path, 100)
    script = shutil.which("retold", path=str(Path(sys.executable).parent))
    command = [script] if script else [sys.executable, "-m", "retold.cli"]
    samples = []
    for _ in range(runs + 1):  # the first run warms the OS file cache and is discarded
        started = time.perf_counter()
        done = subprocess.run([*command, "dump", "--scope", "user:x", "--store", str(path)],
                              capture_output=True, text=True, timeout=60)
        samples.append((time.perf_counter() - started) * 1000)
        assert done.returncode == 0, done.stderr
    return {"command": "retold dump --scope user:x --store <file>",
            "via": "console script" if script else "python -m retold.cli",
            "ms": summarize(samples[1:]), "target_ms": 1000}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        startup = bench_startup(Path(tmp), args.runs)
        print("startup", startup, flush=True)
        reembed = bench_reembed(Path(tmp), args.records)
        print("reembed", reembed, flush=True)
    ms = startup["ms"]
    assert isinstance(ms, dict)
    table = [
        ["measure", "value", "detail"],
        [f"reembed {reembed['records']:,} records", f"{reembed['records_per_second']} records/s",
         f"{reembed['seconds']} s total, model {reembed['model_share']:.0%} of it; batch "
         f"{reembed['batch_size']}, 1 torch thread"],
        ["`retold dump` start-up", f"p50 {ms['p50']:.0f} ms / p95 {ms['p95']:.0f} ms",
         f"{ms['n']} runs via {startup['via']}; target < 1000 ms"],
    ]
    write_report("ops", {"machine": machine(), "model": MODEL, "reembed": reembed, "startup": startup},
                 table, notes="Real all-MiniLM-L6-v2 on one torch thread for re-embedding; start-up "
                              "is a model-free command run as a fresh process.")


if __name__ == "__main__":
    main()
