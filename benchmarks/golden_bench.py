"""How long ``retold eval`` takes: a 500-item golden set over a 10,000-record store.

The store is the search benchmarks' synthetic one (``benchmarks/search_data.py``): twenty
users and two projects. The agent reads five of the users' scopes (each for its own user)
and both projects; ``--queries`` distinct searches (paraphrases, identifiers, names), each
asked for every one of those five users, fill the search log through ``memory_search``. ``retold
golden capture`` samples ``--items`` of them, stratified; each is labelled by script (an
answered search expects its first record, an empty one "nothing stored") and the set is
frozen. Then ``retold eval`` runs as its own process, as a CI job would run it: import,
runtime on the store opened read-only, every item's search and its scope probe, the
report. Timed from process start to exit, ``--runs`` times; the report also gives the time
inside the evaluation alone.

Vectors come from the configured model (all-MiniLM-L6-v2 on ONNX Runtime by default);
``--fake`` uses the fake embedder instead, which measures the search path without a model.

Target: ``retold eval`` of 500 items over 10K records <= 30 s.

Run: ``.venv/bin/python -m benchmarks.golden_bench [--records 10000] [--items 500]
[--queries 200] [--runs 3] [--fake] [--config FILE]``. Writes golden_bench.json and .md
into ``--results-dir`` (benchmarks/results).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from benchmarks.report import RESULTS, machine, pin_threads, summarize, write_report  # noqa: E402

pin_threads()

import yaml  # noqa: E402

from benchmarks.search_data import (  # noqa: E402
    AGENT,
    USERS,
    fake_vectors,
    generate,
    make_queries,
    populate,
    real_vectors,
)
from retold import build_runtime, load_config  # noqa: E402
from retold.clock import SystemClock  # noqa: E402
from retold.index.embedder import FakeEmbedder  # noqa: E402
from retold.models import Principal, Scope  # noqa: E402
from retold.quality.capture import capture  # noqa: E402
from retold.quality.golden import freeze, label, write_golden  # noqa: E402

TARGET_S = 30.0
ASKERS = USERS[:5]  # the users whose agent searches


def build(folder: Path, records: int, queries: int, items: int, fake: bool,
          base_config: Path | None) -> tuple[Path, Path, int]:
    """The store, its search log, and a frozen labelled set; (config file, set file, items)."""
    store = folder / "memory.sqlite"
    settings: dict[str, object] = {"store": {"path": str(store)}}
    embedder = FakeEmbedder() if fake else None
    if embedder is not None:
        settings["embedding"] = {"model": "fake", "version": embedder.version, "dims": embedder.dims}
    config_file = folder / "config.yaml"
    base = yaml.safe_load(base_config.read_text()) if base_config else {}
    config_file.write_text(yaml.safe_dump({**base, **settings}))
    config = load_config(config_file)
    specs = generate(records)
    with build_runtime(config, embedder=embedder) as rt:
        contents = [str(spec["content"]) for spec in specs]
        vectors = (fake_vectors(contents, rt.embedder) if isinstance(rt.embedder, FakeEmbedder)
                   else real_vectors(rt.embedder, contents))
        started = time.perf_counter()
        populate(rt, specs, vectors)
        for user in ASKERS[1:]:
            rt.host.grant(AGENT, Scope("user", user), read=True)
        print(f"wrote {records:,} records in {time.perf_counter() - started:.0f} s", flush=True)
        started = time.perf_counter()
        for asked in make_queries(specs, queries):
            for user in ASKERS:
                rt.tools.call("memory_search", Principal(AGENT, user, f"bench-{user}"), {"queries": asked})
        rt.flush_search_log()
        print(f"logged {queries * len(ASKERS)} searches in {time.perf_counter() - started:.0f} s", flush=True)
        golden = capture(rt.store, size=items, seed=0, now=rt.clock.now(), source="golden_bench").golden
    for item in golden.items:
        golden = (label(golden, item.id, expected=[item.candidates[0].id]) if item.candidates
                  else label(golden, item.id, nothing_stored=True))
    golden = freeze(golden, SystemClock().now())
    path = folder / "bench.jsonl"
    write_golden(path, golden)
    return config_file, path, len(golden.items)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--items", type=int, default=500)
    parser.add_argument("--queries", type=int, default=200,
                        help="distinct queries, each searched for every asking user (at most about 250)")
    parser.add_argument("--runs", type=int, default=3, help="timed `retold eval` processes")
    parser.add_argument("--fake", action="store_true",
                        help="the fake embedder instead of the configured model")
    parser.add_argument("--config", type=Path, help="a config file to start from (default: the defaults)")
    parser.add_argument("--results-dir", type=Path, default=RESULTS)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="retold-golden-bench-") as tmp:
        folder = Path(tmp)
        config, golden, items = build(folder, args.records, args.queries, args.items, args.fake, args.config)
        walls: list[float] = []
        inside: list[float] = []
        last: dict[str, object] = {}
        for run in range(args.runs):
            started = time.perf_counter()
            done = subprocess.run([sys.executable, "-m", "retold.cli", "eval", str(golden), "--config",
                                   str(config), "--report-dir", str(folder / "reports"), "--tolerance",
                                   "search_p50_ms=10000%"], capture_output=True, text=True)
            walls.append(time.perf_counter() - started)
            if done.returncode != 0:
                raise SystemExit(f"retold eval failed (exit {done.returncode}): {done.stderr.strip()}")
            reports = sorted((folder / "reports").glob("eval-*.json"))
            last = json.loads(reports[-1].read_text())
            inside.append(float(str(last["seconds"])))
            print(f"run {run + 1}: {walls[-1]:.1f} s ({inside[-1]:.1f} s evaluating)", flush=True)
    overall = last["overall"]
    assert isinstance(overall, dict)
    settings = last["settings"]
    assert isinstance(settings, dict)
    wall = summarize([w * 1000 for w in walls])
    met = wall["p50"] / 1000 <= TARGET_S
    data = {
        "machine": machine(), "records": args.records, "items": items,
        "searches_logged": args.queries * len(ASKERS),
        "embedding": settings["embedding"], "runs": args.runs,
        "eval_process_s": [round(w, 2) for w in walls], "evaluation_s": [round(s, 2) for s in inside],
        "target_s": TARGET_S, "met": met, "last_report": {"overall": overall},
    }
    table = [["measure", "value"],
             ["`retold eval` process, median of runs (s)", f"{wall['p50'] / 1000:.1f}"],
             ["evaluation inside it, median (s)", f"{sorted(inside)[len(inside) // 2]:.1f}"],
             ["items (each searched twice: the item and its scope probe)", str(items)],
             ["search p50 (ms)", str(overall["search_p50_ms"])],
             ["recall@10 (labels are the logged first results)", str(overall["recall_at_k"])]]
    notes = (f"Target: `retold eval` of {items} items over {args.records:,} records <= {TARGET_S:g} s:"
             f" {wall['p50'] / 1000:.1f} s -> **{'met' if met else 'NOT met'}**.\n\nEmbedding"
             f" {settings['embedding']}; {args.runs} runs, each a fresh process timed from start to exit;"
             " the store is opened read-only and no search-log row is written.")
    write_report("golden_bench", data, table, notes, directory=args.results_dir)
    print(f"retold eval: {wall['p50'] / 1000:.1f} s for {items} items ({'met' if met else 'NOT met'})")


if __name__ == "__main__":
    main()
