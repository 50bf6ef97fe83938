"""Integrity benchmark: what each store check costs at 50K records, against opening.

A store of ``--records`` records (each with its FTS row and a random 384-d vector of the
fake family, written through ``Store.write_record`` as the write path does) is opened and
checked ``--runs`` times with a warm OS file cache. Reported per step: SQLite's
``quick_check`` and ``integrity_check``, the FTS5 ``integrity-check``, the record / FTS /
embedding agreement, and plain opening (``Store(path)``, no migration pending), so the
question "should opening run a quick check?" is answered with numbers
(docs/decisions.md, "Integrity checks").

Run: ``.venv/bin/python -m benchmarks.integrity_bench [--records 50000] [--runs 5]``.
Writes benchmarks/results/integrity.json and integrity.md.
"""

from __future__ import annotations

import argparse
import sqlite3
import tempfile
import time
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

from benchmarks.report import machine, pin_threads, summarize, write_report  # noqa: E402

pin_threads()

import numpy as np  # noqa: E402

from retold.clock import new_id  # noqa: E402
from retold.models import Scope  # noqa: E402
from retold.store import Embedding, Store  # noqa: E402
from retold.store.integrity import check_connection, check_file  # noqa: E402
from retold.testing import make_record  # noqa: E402

TOPICS = ["deploy", "billing", "editor", "timezone", "review", "testing", "release", "oncall",
          "coffee", "language", "framework", "database", "dashboard", "meeting", "travel"]
DIMS = 384


def populate(path: Path, n: int) -> None:
    """``n`` active records across twenty users, each with its FTS row and vector."""
    rng = np.random.default_rng(n)
    store = Store(path)
    try:
        for start in range(0, n, 2000):
            vectors = rng.standard_normal((min(n, start + 2000) - start, DIMS)).astype(np.float32)
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
            with store.atomic():
                for offset, vector in enumerate(vectors):
                    i = start + offset
                    topic = TOPICS[i % len(TOPICS)]
                    store.write_record(make_record(
                        id=new_id(), scope=Scope("user", f"user{i % 20}"), attribute=f"attr_{i}",
                        subject=f"-/attr_{i}",
                        content=f"User {i % 20} said that the {topic} work item {i} should wait until "
                                f"the {TOPICS[(i * 7) % len(TOPICS)]} review is finished next week."),
                        embedding=Embedding("fake", "1", vector))
    finally:
        store.close()


def timed(runs: int, step: Callable[[], object]) -> dict[str, float]:
    """Milliseconds per run of ``step``, after one discarded run that warms the file cache."""
    step()
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        step()
        samples.append((time.perf_counter() - started) * 1000)
    return summarize(samples)


def stage_ms(path: Path, runs: int, *, quick: bool, stage: str) -> dict[str, float]:
    """One stage of the check, timed as ``check_connection`` reports it."""
    samples = []
    for _ in range(runs + 1):
        with closing(sqlite3.connect(path, isolation_level=None)) as conn:
            report = check_connection(conn, str(path), quick=quick)
        assert report.ok, report.findings
        samples.append(report.timings_ms[stage])
    return summarize(samples[1:])


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "integrity.sqlite"
        started = time.perf_counter()
        populate(path, args.records)
        build_s = time.perf_counter() - started
        print(f"built {args.records} records in {build_s:.1f} s", flush=True)
        results = {
            "open": timed(args.runs, lambda: Store(path).close()),
            "quick_check": stage_ms(path, args.runs, quick=True, stage="quick_check"),
            "integrity_check": stage_ms(path, args.runs, quick=False, stage="integrity_check"),
            "fts_index": stage_ms(path, args.runs, quick=True, stage="fts_index"),
            "agreement": stage_ms(path, args.runs, quick=True, stage="agreement"),
            "check_quick_total": timed(args.runs, lambda: check_file(path, quick=True)),
            "check_full_total": timed(args.runs, lambda: check_file(path)),
        }
        size = path.stat().st_size
    for name, ms in results.items():
        print(name, ms, flush=True)
    labels = {
        "open": "open the store (`Store(path)`, no migration pending)",
        "quick_check": "`PRAGMA quick_check`",
        "integrity_check": "`PRAGMA integrity_check`",
        "fts_index": "FTS5 `integrity-check` (holds the write lock)",
        "agreement": "record / FTS / embedding agreement (one read snapshot)",
        "check_quick_total": "`retold check --quick` work (`check_file(quick=True)`)",
        "check_full_total": "`retold check` work (`check_file()`)",
    }
    table = [["step", "p50 ms", "p95 ms"]]
    table += [[labels[name], f"{ms['p50']:.1f}", f"{ms['p95']:.1f}"] for name, ms in results.items()]
    write_report("integrity", {
        "machine": machine(), "records": args.records, "runs": args.runs, "file_bytes": size,
        "build_seconds": round(build_s, 1), "ms": results,
    }, table, notes=f"{args.records:,} active records with FTS rows and 384-d vectors, a "
                    f"{size / 1e6:.0f} MB file, warm OS cache, {args.runs} runs per step after one "
                    "discarded warm-up run.")


if __name__ == "__main__":
    main()
