"""Search-path benchmark: memory_search latency by stage, against baselines, cold and loaded.

The store and queries are synthetic (``benchmarks/search_data.py``): twenty users and two
projects, records written from templates, a principal who reads about 10% of the rows.
Five modes, all run by default (``--modes`` picks some):

- ``stages`` (``--sizes``, default 1K, 10K, 50K): the fake embedder with a fixed 25 ms
  sleep per query, every stage's p50/p95, warm and cold (``benchmarks/search_stages.py``).
- ``real`` (the ``--sizes`` up to 10K): all-MiniLM-L6-v2 on one thread on the default
  backend, end to end, against ``embed_queries`` on the same backend plus one dot product,
  interleaved; and a repeated query, an embedding-cache hit (``search_stages.py``).
- ``baseline`` (``--baseline-sizes``, default 2.5K and 10K): ``memory_search`` on the
  default config (ONNX Runtime, one thread) against a dense-only sentence-transformers
  baseline (encode, one dot product, argsort), interleaved query by query and then in
  blocks of 20 queries on the same ``--baseline-queries`` distinct texts, one query each;
  p50/p95 of both, their ratio and each encoder's query-embedding p50
  (``benchmarks/search_baseline.py``).
- ``cold`` (``--cold-records``, default 10K): ``--cold-runs`` fresh processes that import
  retold, build the runtime and answer one search, timed from process start and from
  ``import retold``; a process that imports torch fails the mode
  (``benchmarks/search_cold.py``).
- ``contention``: four agent processes writing turns and memories and searching, and two
  workers extracting the sessions they end, on one store (fake embedder, background
  search-log writes) for ``--contention-seconds``; search p50/p95/p99 and errors
  (``benchmarks/contention_bench.py``, which also compares inline log writes).

Targets: stages: non-embedding stages p50 <= 10 ms at 50K, lexical <= 4 ms; real: end to
end <= 1.2x the same-backend bare baseline at 10K, cache hit <= 3 ms; baseline: query
embedding p50 <= 5 ms and end to end <= 0.5x the sentence-transformers baseline at each
size; cold: build_runtime + first search <= 1.5 s from process start at 10K, torch never
imported; contention: search p99 <= 100 ms.

Run: ``.venv/bin/python -m benchmarks.search_bench [--modes stages,real,baseline,cold,contention]
[--sizes 1000,10000,50000] [--baseline-sizes 2500,10000] ...``; ``--help`` lists every
option. Writes search.json and search.md into ``--results-dir`` (benchmarks/results).
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from benchmarks.report import RESULTS, machine, pin_threads, report_name, write_report  # noqa: E402

pin_threads()

import numpy as np  # noqa: E402

from benchmarks import contention_bench  # noqa: E402
from benchmarks.search_baseline import DenseBaseline, run_baseline  # noqa: E402
from benchmarks.search_cold import run_cold  # noqa: E402
from benchmarks.search_data import (  # noqa: E402
    AGENT,
    PROJECTS,
    USER,
    USERS,
    bench_config,
    generate,
    make_queries,
    real_vectors,
    use_config_file,
)
from benchmarks.search_stages import (  # noqa: E402
    CACHE_HIT_RUNS,
    COLD_RUNS,
    EMBED_SLEEP_S,
    STAGES,
    run_real,
    run_stages,
)
from retold.index.embedder import Embedder, embedder_from_config  # noqa: E402

MODES = ("stages", "real", "baseline", "cold", "contention")
BLOCK = 20  # queries per turn in the blocked baseline (benchmarks/search_baseline.py)
REAL_MAX = 10_000  # the real model embeds every record; above this mode "real" is skipped


def _ints(text: str) -> list[int]:
    return [int(s) for s in text.split(",") if s]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--modes", default=",".join(MODES),
                        help=f"comma-separated, any of {', '.join(MODES)} (default: all)")
    parser.add_argument("--sizes", default="1000,10000,50000",
                        help="store sizes for 'stages'; 'real' runs those up to 10,000")
    parser.add_argument("--queries", type=int, default=100, help="searches per size in 'stages' and 'real'")
    parser.add_argument("--baseline-sizes", default="2500,10000", help="store sizes for 'baseline'")
    parser.add_argument("--baseline-queries", type=int, default=200,
                        help="distinct one-query searches per size in 'baseline'")
    parser.add_argument("--cold-records", type=int, default=10_000, help="store size for 'cold'")
    parser.add_argument("--cold-runs", type=int, default=5, help="fresh processes in 'cold'")
    parser.add_argument("--contention-seconds", type=float, default=20.0,
                        help="length of the 'contention' load")
    parser.add_argument("--contention-records", type=int, default=300,
                        help="memories in the 'contention' store before the load")
    parser.add_argument("--config", type=Path, default=None,
                        help="config file the runtimes start from (config.int8.yaml: the int8 encoder "
                             "and its gate); the report is then named after it (search_int8)")
    parser.add_argument("--results-dir", type=Path, default=RESULTS,
                        help="where search.json and search.md go (point smoke runs elsewhere)")
    args = parser.parse_args()
    args.modes = [m for m in args.modes.split(",") if m]
    unknown = sorted(set(args.modes) - set(MODES))
    if unknown:
        parser.error(f"unknown mode {', '.join(unknown)}; choose from {', '.join(MODES)}")
    args.sizes, args.baseline_sizes = _ints(args.sizes), _ints(args.baseline_sizes)
    return args


def _one_thread_embedder() -> Embedder:
    # No query cache: the same texts run at every size, and the bare baseline must encode
    # each time, as the runtime's fresh embedder does on a distinct query.
    config = bench_config(Path("unused"), torch_threads=1, query_cache_entries=0)
    return embedder_from_config(config.embedding)


def run_modes(args: argparse.Namespace, results: dict[str, Any]) -> None:
    """Run every selected mode, filling ``results``; progress goes to stdout."""
    modes = args.modes
    real_sizes = [n for n in args.sizes if n <= REAL_MAX] if "real" in modes else []
    vector_sizes = [*real_sizes, *(args.baseline_sizes if "baseline" in modes else []),
                    *([args.cold_records] if "cold" in modes else [])]
    stage_sizes = args.sizes if {"stages", "real"} & set(modes) else []
    all_records = generate(max([*stage_sizes, *vector_sizes, 1000]))
    searches = make_queries(all_records, args.queries)
    results["example_searches"] = searches[:12]
    bare: Embedder | None = None
    vectors = np.zeros((0, 0), dtype=np.float32)
    if vector_sizes:
        # Document vectors are not timed, so they use every core.
        builder = embedder_from_config(bench_config(Path("unused")).embedding)
        vectors = real_vectors(builder, [str(r["content"]) for r in all_records[:max(vector_sizes)]])
    if real_sizes:
        bare = _one_thread_embedder()  # the same backend as the runtime's
        bare.embed_queries(["warm the baseline up"])
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        for n in stage_sizes:
            row: dict[str, Any] = results["sizes"].setdefault(str(n), {})
            if "stages" in modes:
                row["stages"] = run_stages(tmp, n, all_records[:n], searches)
                print(f"{n:,}: stages done (store built in {row['stages']['build_s']} s)", flush=True)
            if n in real_sizes:
                assert bare is not None
                row["real"] = run_real(tmp, n, all_records[:n], vectors, searches, bare)
                print(f"{n:,}: real done, ratio p50 {row['real']['ratio_p50']}", flush=True)
        if "baseline" in modes:
            dense = DenseBaseline()
            texts = [q for s in make_queries(all_records, args.baseline_queries, seed=17) for q in s]
            texts = texts[: args.baseline_queries]
            for n in args.baseline_sizes:
                for block, key in ((1, "baseline"), (BLOCK, "baseline_blocks")):
                    out = run_baseline(tmp, n, all_records[:n], vectors, texts, dense, block)
                    results[key][str(n)] = out
                    print(f"{n:,}: baseline (blocks of {block}) done, ratio p50 {out['ratio_p50']}",
                          flush=True)
        if "cold" in modes:
            results["cold"] = run_cold(tmp, all_records[:args.cold_records], vectors, args.cold_runs)
            print(f"cold done: {results['cold']['from_process_start_ms']}", flush=True)
    if "contention" in modes:
        results["contention"] = contention_bench.run_contention(
            args.contention_seconds, args.contention_records, ["background"], "fake")
        print(f"contention done: {results['contention']['phases'][0]['search_ms']}", flush=True)


# -- targets and the report --------------------------------------------------------------------


def targets(results: dict[str, Any]) -> list[tuple[str, float | None, float]]:
    """(label, value or None when its mode did not run at that size, limit) per target."""
    sizes = results["sizes"]
    big, ten = sizes.get("50000", {}).get("stages"), sizes.get("10000", {}).get("real")
    out: list[tuple[str, float | None, float]] = [
        ("stages: non-embedding stages (total - embed_wait - embed_names) p50 at 50K, ms",
         big["warm_non_embedding_ms"]["p50"] if big else None, 10.0),
        ("stages: lexical p50 at 50K, ms", big["warm_ms"]["lexical"]["p50"] if big else None, 4.0),
        ("real: end-to-end p50 / same-backend bare baseline at 10K", ten["ratio_p50"] if ten else None, 1.2),
        ("real: repeated query (embedding cache hit) p50 at 10K, ms",
         ten["cache_hit_ms"]["p50"] if ten else None, 3.0),
    ]
    for key, how in (("baseline", "per query"), ("baseline_blocks", f"in blocks of {BLOCK}")):
        base = results.get(key, {})
        out.append((f"baseline, alternating {how}: Retold query embedding p50 (largest size), ms",
                    base[max(base, key=int)]["retold_embed_ms"]["p50"] if base else None, 5.0))
        for n in ("2500", "10000"):
            out.append((f"baseline, alternating {how}: end-to-end p50 / sentence-transformers "
                        f"dense-only p50 at {int(n):,}", base[n]["ratio_p50"] if n in base else None, 0.5))
    cold = results.get("cold")
    out.append(("cold: build_runtime + first search from process start at 10K, ms",
                cold["from_process_start_ms"]["p50"] if cold and cold["records"] == 10_000 else None,
                1500.0))
    load = results.get("contention")
    out.append(("contention: search p99 with 4 agents + 2 extraction workers, ms",
                load["phases"][0]["search_ms"]["p99"] if load else None, 100.0))
    return out


def _cpu(b: dict[str, Any]) -> str:
    """Process CPU time of both sides and their ratio; absent from results made before it."""
    if "retold_cpu_ms" not in b:
        return "-"
    return (f"{b['retold_cpu_ms']['p50']:.2f} / {b['dense_cpu_ms']['p50']:.2f} "
            f"({b['cpu_ratio_p50']:.2f})")


def _config(results: dict[str, Any]) -> str:
    """``default config``, or the config file the runtimes started from."""
    chosen = results.get("config", "defaults")
    return "default config" if chosen == "defaults" else f"config {Path(chosen).name}"


def _met(value: float | None, limit: float) -> str:
    return "n/a" if value is None else ("met" if value <= limit else "NOT met")


def _pair(summary: dict[str, float]) -> str:
    return f"{summary['p50']:.1f} / {summary['p95']:.1f}"


def tables(results: dict[str, Any]) -> tuple[list[list[str]], list[str]]:
    """The main table (stages and real per size) and the other modes' markdown lines."""
    table = [["records", "eligible", "A warm total p50 / p95", "A non-embed p50 / p95",
              "A lexical p50 / p95", "A dense / entity / log p50", "A cold total p50",
              "B real e2e p50 / p95", "B bare p50", "B ratio", "B cache hit p50"]]
    for n, row in results["sizes"].items():
        stages, real = row.get("stages"), row.get("real")
        a = ["-"] * 6 if stages is None else [
            f"{stages['eligible']:,} ({stages['eligible_pct']}%)", _pair(stages["warm_ms"]["total"]),
            f"{stages['warm_non_embedding_ms']['p50']:.2f} / {stages['warm_non_embedding_ms']['p95']:.2f}",
            f"{stages['warm_ms']['lexical']['p50']:.2f} / {stages['warm_ms']['lexical']['p95']:.2f}",
            " / ".join(f"{stages['warm_ms'][s]['p50']:.2f}" for s in ("dense", "entity", "log")),
            f"{stages['cold_ms']['total']['p50']:.1f}"]
        b = ["-"] * 4 if real is None else [
            _pair(real["end_to_end_ms"]), f"{real['bare_embed_plus_dot_ms']['p50']:.1f}",
            f"{real['ratio_p50']:.2f}", f"{real['cache_hit_ms']['p50']:.2f}"]
        table.append([f"{int(n):,}", *a, *b])
    lines: list[str] = []
    if results["baseline"]:
        lines += ["", f"Mode baseline (ms): memory_search ({_config(results)}, ONNX Runtime, one thread) "
                  "against sentence-transformers encode + one dot product + argsort, interleaved "
                  f"query by query, then in blocks of {BLOCK} queries (each model's weights outgrow "
                  "the last-level cache, so per-query alternation makes each side reload them; see "
                  "benchmarks/search_baseline.py):", "",
                  "| records | alternating | queries | Retold p50 / p95 | dense-only p50 / p95 | ratio p50 | "
                  "Retold embed p50 | ST embed p50 | Retold non-embed p50 | CPU ms p50 Retold / "
                  "dense-only (ratio) |", "|" + "---|" * 10]
        rows = [(n, b) for key in ("baseline", "baseline_blocks") for n, b in results.get(key, {}).items()]
        for n, b in rows:
            how = "per query" if b.get("block", 1) == 1 else f"blocks of {b['block']}"
            lines.append(f"| {int(n):,} | {how} | {b['queries']} | {_pair(b['retold_ms'])} "
                         f"| {_pair(b['dense_ms'])} "
                         f"| {b['ratio_p50']:.2f} | {b['retold_embed_ms']['p50']:.2f} | "
                         f"{b['dense_embed_ms']['p50']:.2f} | {b['retold_non_embed_p50_ms']:.2f} | "
                         f"{_cpu(b)} |")
    cold = results.get("cold")
    if cold:
        lines += ["", f"Mode cold: {cold['runs']} fresh processes on {cold['records']:,} records "
                  f"({cold['backend']}, torch never imported), median ms: from process start "
                  f"{cold['from_process_start_ms']['p50']:.0f}, from `import retold` "
                  f"{cold['from_import_ms']['p50']:.0f} (import {cold['import_ms']['p50']:.0f}, "
                  f"build_runtime {cold['build_ms']['p50']:.0f}, first search "
                  f"{cold['first_search_ms']['p50']:.0f})."]
    load = results.get("contention")
    if load:
        lines += ["", "Mode contention: " + contention_bench.notes(load, load["phases"][0]["seconds"]), ""]
        rows = contention_bench.table(load)
        lines += ["| " + " | ".join(r) + " |" for r in rows[:1]] + ["|" + "---|" * len(rows[0])]
        lines += ["| " + " | ".join(r) + " |" for r in rows[1:]]
    return table, lines


def _stage_notes(args: argparse.Namespace, results: dict[str, Any]) -> str:
    """What modes stages and real did, with the per-stage p50 table (empty if neither ran)."""
    if not results["sizes"]:
        return f"Modes run: {', '.join(args.modes)}. All times in ms.\n"
    stage_rows = ["| records | " + " | ".join(STAGES) + " |", "|---|" + "---|" * len(STAGES)]
    for kind in ("warm_ms", "cold_ms"):
        for n, row in results["sizes"].items():
            if "stages" in row:
                label = f"{int(n):,}" + (" cold" if kind == "cold_ms" else "")
                stage_rows.append(f"| {label} | " + " | ".join(
                    f"{row['stages'][kind][s]['p50']:.2f}" for s in STAGES) + " |")
    return (
        f"Modes run: {', '.join(args.modes)}. All times in ms. Mode stages (A columns): FakeEmbedder "
        f"vectors, each forward pass sleeps a fixed {EMBED_SLEEP_S * 1000:.0f} ms; {args.queries} searches "
        f"of 1-2 queries (paraphrases, identifiers, names); principal `{USER}` reads user:{USER} + 2 "
        "projects (~10% of rows); rewrite and reranker off. Warm = every search after the first on one "
        f"runtime (search_log warm = 1); cold = the first search of {COLD_RUNS} freshly opened runtimes "
        f"(warm = 0). Mode real (B columns): {results['model']} on one thread ({_config(results)}), distinct "
        "queries, wall clock; bare = `embed_queries` of the same texts on the same backend + one numpy "
        "dot product over every stored vector, interleaved in the same run; cache hit = one repeated "
        f"search, {CACHE_HIT_RUNS} runs.\n\nPer-stage p50 (ms), mode stages, warm rows then cold rows:"
        "\n\n" + "\n".join(stage_rows) + "\n"
    )


def main() -> None:
    args = parse_args()
    use_config_file(args.config)
    results: dict[str, Any] = {
        "machine": machine(), "modes": args.modes, "embed_sleep_ms": EMBED_SLEEP_S * 1000,
        "config": str(args.config or "defaults"),
        "model": bench_config(Path("unused")).embedding.model, "principal": {"agent": AGENT, "user": USER,
                                              "reads": [f"user:{USER}", *(f"project:{p}" for p in PROJECTS)]},
        "users": len(USERS), "projects": len(PROJECTS), "flags": "rewrite off, reranker off",
        "sizes": {}, "baseline": {}, "baseline_blocks": {},
    }
    run_modes(args, results)
    checks = targets(results)
    results["targets"] = [{"target": label, "value": value, "limit": limit,
                           "met": None if value is None else value <= limit}
                          for label, value, limit in checks]
    target_lines = [f"- {label} <= {limit:g}: {'-' if value is None else value} -> **{_met(value, limit)}**"
                    for label, value, limit in checks]
    for line in target_lines:
        print(line.replace("**", ""), flush=True)
    table, mode_lines = tables(results)
    notes = ("Targets:\n\n" + "\n".join(target_lines) + "\n\n" + _stage_notes(args, results)
             + "\n".join(mode_lines))
    write_report(report_name("search", args.config), results, table, notes=notes, directory=args.results_dir)


if __name__ == "__main__":
    main()
