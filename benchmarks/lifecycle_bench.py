"""Lifecycle benchmark: the capacity sweep over a large store.

The synthetic store of the search benchmarks (``benchmarks/search_data.py``, fake
embedder), at ``--records`` (default 100K), with two changes so the sweep has real work:
episodic records share one attribute per scope, and semantic ones share their template's
attribute (in the benchmark, several live values per attribute; the write path would
have superseded most of them). 50 records per user scope are pinned, ``--searches`` real
searches fill the search log, and their rows are copied until it holds ``--log-rows``
(the use part of the score parses every one). Caps are 15% under each scope's size
(at 100K: 4,038 per user scope, which holds about 4,750; 2,125 per project scope).

1. Capacity. Measured, each ``--runs`` times on fresh copies of the store: the report-only sweep
(``retold capacity``), the applied sweep (``--apply``: scores, archives, events), and as
the baseline in the same run a read of every record through ``Store.find_records``.
Checked after each applied sweep: no pinned record archived, every (subject, attribute)
that had a live record still has one, every scope at its cap. Target (issue "Memory
people can undo, keep, cap, move and clean"): the applied sweep over 100K <= 10 s.

2. Export and import. One user scope of ``--scope-records`` (default 50K) records, the
same generator: ``retold export --include-history`` and ``retold import --confirm`` into
a fresh store of the same embedding family (vectors carried in the file), each run as the
installed command in its own process, timed, with the process's peak memory; the same at
a fifth of the size shows whether memory stays flat. Then ``--reembed-records`` records
imported from a file of another family with the real all-MiniLM-L6-v2, so every vector is
computed again, against the encoder's own throughput on the same texts in the importer's
batches. Targets: export <= 60 s and import <= 60 s at 50K with matching family.

Run: ``.venv/bin/python -m benchmarks.lifecycle_bench [--records 100000]``.
Writes benchmarks/results/lifecycle.json and lifecycle.md.
"""

from __future__ import annotations

import argparse
import io
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.report import machine, pin_threads, summarize, write_report

pin_threads()

from benchmarks.search_data import USERS, fake_vectors, fill_search_log, generate, populate  # noqa: E402
from retold import build_runtime, load_config  # noqa: E402
from retold.index.embedder import FakeEmbedder  # noqa: E402
from retold.ingest.equivalence import ExactJudge  # noqa: E402
from retold.models import ACTIVE_STATUSES, Principal, Scope  # noqa: E402
from retold.portable.importer import BATCH  # noqa: E402
from retold.runtime import Runtime  # noqa: E402


def caps(n: int) -> dict[str, int]:
    """Caps 15% under a scope's typical size: a user scope holds about 4.75% of the
    records, a project scope 2.5%."""
    return {"user": round(0.85 * 0.0475 * n), "project": round(0.85 * 0.025 * n)}


def _runtime(path: Path, n: int) -> Runtime:
    config = load_config(overrides={"store": {"path": str(path)}, "embedding": {"model": "fake"},
                                    "lifecycle": {"max_active_per_scope": caps(n)}})
    return build_runtime(config, embedder=FakeEmbedder(), judge=ExactJudge())


def build(path: Path, n: int, searches: int, log_rows: int) -> dict[str, int]:
    records = generate(n)
    for spec in records:
        spec["attribute"] = "episode" if spec["type"] == "episodic" else spec["attribute"].rsplit("_", 1)[0]
    rt = _runtime(path, n)
    try:
        populate(rt, records, fake_vectors([r["content"] for r in records], rt.embedder))
        pinned = 0
        for user in USERS:
            for record in rt.store.find_records(scopes=[Scope("user", user)], statuses=ACTIVE_STATUSES,
                                                limit=50):
                rt.store.pin(record.id, "bench", "keep", 50)
                pinned += 1
        logged = fill_search_log(rt, records, searches, log_rows)
        return {"records": n, "pinned": pinned, "search_log_rows": logged}
    finally:
        rt.close()


def _invariants(rt: Runtime, before: dict[str, tuple[str, str, str, bool]]) -> None:
    after = {r.id: r.status for r in rt.store.find_records()}
    held = {(scope, key) for scope, key, status, _ in before.values() if status in ACTIVE_STATUSES}
    kept = {(scope, key) for rid, (scope, key, _, _) in before.items() if after[rid] in ACTIVE_STATUSES}
    assert held == kept, "an attribute lost its last live value"
    assert all(after[rid] == status for rid, (_, _, status, pinned) in before.items() if pinned)


def run(path: Path, n: int, runs: int) -> dict[str, object]:
    dry, applied, baseline, archived = [], [], [], 0
    for i in range(runs):
        copy = path.with_name(f"run{i}.sqlite")
        shutil.copy(path, copy)
        rt = _runtime(copy, n)
        try:
            started = time.perf_counter()
            every = rt.store.find_records()
            baseline.append((time.perf_counter() - started) * 1000)
            before = {r.id: (str(r.scope), f"{r.subject_entity_id}/{r.attribute}", r.status,
                             rt.store.is_pinned(r.id)) for r in every}
            started = time.perf_counter()
            report = rt.operations.capacity("bench", apply=False)
            dry.append((time.perf_counter() - started) * 1000)
            started = time.perf_counter()
            results = rt.operations.capacity("bench", apply=True)
            applied.append((time.perf_counter() - started) * 1000)
            assert [len(r.archived) for r in results] == [len(r.archived) for r in report]
            archived = sum(len(r.archived) for r in results)
            _invariants(rt, before)
            assert not any(r.archived for r in rt.operations.capacity("bench", apply=False))
        finally:
            rt.close()
            copy.unlink()
    return {"report_ms": summarize(dry), "apply_ms": summarize(applied), "read_all_ms": summarize(baseline),
            "archived": archived, "scopes_over": len(report)}


def _scope_store(path: Path, n: int) -> None:
    """``n`` records, all in user:priya."""
    records = generate(n)
    for spec in records:
        spec["scope"] = Scope("user", USERS[0])
    rt = _runtime(path, n)
    try:
        populate(rt, records, fake_vectors([r["content"] for r in records], rt.embedder))
    finally:
        rt.close()


# Runs the CLI and, at exit, writes the process's peak resident memory (VmHWM, in KiB).
# Not ru_maxrss: Linux carries it across exec, so a child would report this process's size.
_PEAK = ("import atexit, sys\n"
         "def peak():\n"
         "    text = open('/proc/self/status').read()\n"
         "    open(sys.argv[1], 'w').write(text.split('VmHWM:')[1].split()[0])\n"
         "atexit.register(peak)\n"
         "from retold.cli import main\n"
         "sys.exit(main(sys.argv[2:]))\n")


def _cli(args: list[str], config: Path) -> tuple[float, float]:
    """Run one ``retold`` command in its own process: (seconds, peak resident MiB)."""
    with tempfile.NamedTemporaryFile("r", suffix=".kib") as peak:
        started = time.perf_counter()
        done = subprocess.run([sys.executable, "-c", _PEAK, peak.name, *args, "--config", str(config)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=False)
        seconds = time.perf_counter() - started
        assert done.returncode == 0, done.stderr
        return seconds, int(peak.read()) / 1024


def bench_transfer(tmp: Path, n: int) -> dict[str, object]:
    embedder = FakeEmbedder()
    config = tmp / "fake.yaml"
    config.write_text(f"embedding:\n  model: fake\n  version: {embedder.version}\n  dims: {embedder.dims}\n")
    source, target, file = tmp / f"source{n}.sqlite", tmp / f"target{n}.sqlite", tmp / f"scope{n}.jsonl"
    _scope_store(source, n)
    with _runtime(target, n) as rt:
        rt.host.grant("bench-agent", Scope("user", USERS[0]), read=True, write=True)
    export_s, export_mib = _cli(["export", "--scope", f"user:{USERS[0]}", "--include-history",
                                 "--out", str(file), "--store", str(source)], config)
    import_s, import_mib = _cli(["import", str(file), "--agent", "bench-agent", "--user", USERS[0],
                                 "--confirm", "--store", str(target)], config)
    with _runtime(target, n) as rt:
        landed = rt.store.portable_count(Scope("user", USERS[0]), ACTIVE_STATUSES)
    assert landed == n, landed
    return {"records": n, "file_mib": round(file.stat().st_size / 2**20, 1),
            "export_s": round(export_s, 2), "export_peak_mib": round(export_mib),
            "import_s": round(import_s, 2), "import_peak_mib": round(import_mib)}


def bench_reembed_import(tmp: Path, n: int) -> dict[str, object]:
    """Import ``n`` records from a file of another family with the real model."""
    source = tmp / "reembed-source.sqlite"
    _scope_store(source, n)
    out = io.StringIO()
    with _runtime(source, n) as rt:
        rt.operations.export(Scope("user", USERS[0]), out)
    lines = out.getvalue().splitlines()
    contents = [r["content"] for r in generate(n)]
    config = load_config(overrides={"store": {"path": str(tmp / "reembed-target.sqlite")},
                                    "embedding": {"torch_threads": 1}})
    with build_runtime(config) as rt:
        rt.host.grant("bench-agent", Scope("user", USERS[0]), read=True, write=True)
        rt.embedder.embed_documents(["warm up"])
        started = time.perf_counter()
        for start in range(0, n, BATCH):
            rt.embedder.embed_documents(contents[start:start + BATCH])
        encoder_s = time.perf_counter() - started
        started = time.perf_counter()
        who = Principal("bench-agent", USERS[0], None, None)
        result = rt.operations.import_lines(lines, who, confirm=True)
        import_s = time.perf_counter() - started
        model = rt.embedder.name
    assert result.embedded == n and not result.failed, result
    return {"records": n, "model": model, "import_s": round(import_s, 2),
            "import_records_per_s": round(n / import_s, 1), "encoder_records_per_s": round(n / encoder_s, 1),
            "share_of_encoder": round(encoder_s / import_s, 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--searches", type=int, default=200)
    parser.add_argument("--log-rows", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--scope-records", type=int, default=50_000)
    parser.add_argument("--reembed-records", type=int, default=2_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "store.sqlite"
        started = time.perf_counter()
        store = build(path, args.records, args.searches, args.log_rows)
        print(f"built {store} in {time.perf_counter() - started:.0f} s", flush=True)
        capacity = run(path, args.records, args.runs)
        print(capacity, flush=True)
        path.unlink()
        transfer = [bench_transfer(Path(tmp), args.scope_records // 5),
                    bench_transfer(Path(tmp), args.scope_records)]
        print(transfer, flush=True)
        reembed = bench_reembed_import(Path(tmp), args.reembed_records)
        print(reembed, flush=True)
    apply_ms, report_ms, read_ms = capacity["apply_ms"], capacity["report_ms"], capacity["read_all_ms"]
    assert isinstance(apply_ms, dict) and isinstance(report_ms, dict) and isinstance(read_ms, dict)
    table = [
        ["measure", "p50", "p95", "detail"],
        [f"capacity sweep, applied, {args.records:,} records", f"{apply_ms['p50'] / 1000:.2f} s",
         f"{apply_ms['p95'] / 1000:.2f} s",
         f"archived {capacity['archived']:,} in {capacity['scopes_over']} scopes; target <= 10 s; "
         f"{apply_ms['p50'] / read_ms['p50']:.2f}x the baseline read"],
        ["capacity report (no --apply)", f"{report_ms['p50'] / 1000:.2f} s",
         f"{report_ms['p95'] / 1000:.2f} s",
         f"{report_ms['p50'] / read_ms['p50']:.2f}x the baseline read"],
        ["baseline: read every record (find_records)", f"{read_ms['p50'] / 1000:.2f} s",
         f"{read_ms['p95'] / 1000:.2f} s", ""],
    ]
    for t in transfer:
        table.append([f"`retold export`, one scope of {t['records']:,} records", f"{t['export_s']} s", "",
                      f"{t['file_mib']} MiB file; peak {t['export_peak_mib']} MiB; target <= 60 s at 50K"])
        table.append([f"`retold import --confirm`, same family, {t['records']:,}", f"{t['import_s']} s", "",
                      f"peak {t['import_peak_mib']} MiB; target <= 60 s at 50K"])
    table.append([f"import from another family, {reembed['records']:,} records",
                  f"{reembed['import_s']} s", "",
                  f"{reembed['import_records_per_s']} records/s, {reembed['share_of_encoder']:.0%} of the "
                  f"encoder's own {reembed['encoder_records_per_s']} records/s (1 thread)"])
    write_report("lifecycle", {"machine": machine(), "store": store, "caps": caps(args.records),
                               "capacity": capacity, "transfer": transfer, "reembed_import": reembed},
                 table, notes=f"SQLite. Capacity: fake embedder; {store['pinned']:,} pinned records, "
                              f"{store['search_log_rows']:,} search-log rows; {args.runs} runs on fresh "
                              "copies; checked each run: no pinned record archived, no attribute left "
                              "without a live value. Export and import: each a fresh `retold` process; peak "
                              "is its resident memory.")


if __name__ == "__main__":
    main()
