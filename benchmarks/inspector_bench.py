"""Inspector benchmark: server time of the inspector's pages on a large store.

The synthetic store of the search benchmarks (``benchmarks/search_data.py``, fake
embedder) at ``--records`` (default 100K), with ``--searches`` real searches in the search
log, copied until it holds ``--log-rows`` rows (a record page lists the searches that
returned the record). Each page is requested in-process through
Starlette's test client with a principal's bearer token (the searching principal of the
search benchmarks) and with an operator's, ``--requests`` times over different records or
questions; the time is the whole request, template included. As the baseline in the same
run, the tool calls each page builds on: ``memory_get`` of the same records and
``memory_search`` of the same questions.

Target (issue "A memory inspector in the browser"): the record page and the search page
render in <= 150 ms server time at 100K records.

Run: ``.venv/bin/python -m benchmarks.inspector_bench [--records 100000]``.
Writes benchmarks/results/inspector.json and inspector.md.
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from benchmarks.report import machine, pin_threads, summarize, write_report

pin_threads()

from starlette.testclient import TestClient  # noqa: E402

from benchmarks.search_data import (  # noqa: E402
    fake_vectors,
    fill_search_log,
    generate,
    make_queries,
    populate,
    principal,
)
from retold import build_runtime, load_config  # noqa: E402
from retold.index.embedder import FakeEmbedder  # noqa: E402
from retold.ingest.equivalence import ExactJudge  # noqa: E402
from retold.models import Scope  # noqa: E402
from retold.runtime import Runtime  # noqa: E402
from retold.ui.access import token_digest  # noqa: E402
from retold.ui.app import create_app  # noqa: E402

PRINCIPAL, OPERATOR = "bench-principal-token", "bench-operator-token"


def _runtime(path: Path) -> Runtime:
    who = principal()
    config = load_config(overrides={"store": {"path": str(path)}, "embedding": {"model": "fake"}, "ui": {
        "tokens": [{"sha256": token_digest(PRINCIPAL), "agent_id": who.agent_id, "user_id": who.user_id},
                   {"sha256": token_digest(OPERATOR), "operator": "bench"}]}})
    return build_runtime(config, embedder=FakeEmbedder(), judge=ExactJudge())


def build(path: Path, n: int, searches: int, log_rows: int) -> list[list[str]]:
    records = generate(n)
    rt = _runtime(path)
    try:
        populate(rt, records, fake_vectors([r["content"] for r in records], rt.embedder))
        fill_search_log(rt, records, searches, log_rows)
        return make_queries(records, searches)
    finally:
        rt.close()


def _timed(calls: list[Callable[[], object]]) -> list[float]:
    out = []
    for call in calls:
        started = time.perf_counter()
        call()
        out.append((time.perf_counter() - started) * 1000)
    return out


def run(path: Path, queries: list[list[str]], requests: int) -> dict[str, object]:
    rt = _runtime(path)
    try:
        who = principal()
        readable = rt.store.find_records(scopes=[Scope("user", who.user_id)], limit=50_000)
        rng = random.Random(3)
        ids = [r.id for r in rng.sample(readable, requests)]
        asked = [q[0] for q in rng.sample(queries, min(requests, len(queries)))]
        app = create_app(rt)
        as_principal = TestClient(app, headers={"authorization": f"Bearer {PRINCIPAL}"})
        as_operator = TestClient(app, headers={"authorization": f"Bearer {OPERATOR}"})

        def get(client: TestClient, url: str, params: dict[str, str] | None = None) -> Callable[[], object]:
            def call() -> object:
                response = client.get(url, params=params)
                assert response.status_code == 200, (url, response.status_code)
                return response
            return call

        # One warm-up of each page, as a browser's first visit pays the template compile.
        for client in (as_principal, as_operator):
            get(client, f"/records/{ids[0]}")()
            get(client, "/search", {"q": asked[0], "agent": who.agent_id, "user": who.user_id})()
        pages = {
            "record page (principal)": _timed([get(as_principal, f"/records/{i}") for i in ids]),
            "record page (operator)": _timed([get(as_operator, f"/records/{i}") for i in ids]),
            "search page (principal)": _timed([get(as_principal, "/search", {"q": q}) for q in asked]),
            "search page (operator)": _timed([get(as_operator, "/search", {
                "q": q, "agent": who.agent_id, "user": who.user_id}) for q in asked]),
            "records list, first page (principal)": _timed([get(as_principal, "/records")] * 20),
            "records list, filtered by words (principal)": _timed(
                [get(as_principal, "/records", {"q": q.split()[-1]}) for q in asked[:20]]),
            "scopes (principal)": _timed([get(as_principal, "/scopes")] * 20),
            "scopes (operator)": _timed([get(as_operator, "/scopes")] * 20),
        }
        baseline = {
            "memory_get of the same records": _timed(
                [lambda i=i: rt.tools.call("memory_get", who, {"ids": [i]}) for i in ids]),
            "memory_search of the same questions": _timed(
                [lambda q=q: rt.tools.call("memory_search", who, {"queries": [q]}) for q in asked]),
        }
        return {"pages_ms": {k: summarize(v) for k, v in pages.items()},
                "baseline_ms": {k: summarize(v) for k, v in baseline.items()},
                "search_log_rows": rt.store._conn.execute("SELECT count(*) FROM search_log").fetchone()[0]}
    finally:
        rt.close()


def _table(report: dict[str, object]) -> list[list[str]]:
    rows = [["page or call", "p50 ms", "p95 ms", "n"]]
    for group in ("pages_ms", "baseline_ms"):
        for name, s in report[group].items():  # type: ignore[attr-defined]
            rows.append([name, f"{s['p50']:.1f}", f"{s['p95']:.1f}", str(s["n"])])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--searches", type=int, default=200)
    parser.add_argument("--log-rows", type=int, default=20_000)
    parser.add_argument("--requests", type=int, default=100)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="retold-inspector-") as folder:
        path = Path(folder) / "memory.sqlite"
        started = time.perf_counter()
        queries = build(path, args.records, args.searches, args.log_rows)
        built_s = time.perf_counter() - started
        report: dict[str, object] = {"machine": machine(), "records": args.records,
                                     "build_s": round(built_s, 1), **run(path, queries, args.requests)}
    table = _table(report)
    for row in table:
        print(" | ".join(row))
    write_report("inspector", report, table, notes=(
        f"{args.records:,} records, {report['search_log_rows']:,} search-log rows; each page requested "
        f"in-process through Starlette's test client, {args.requests} times over different records or "
        "questions, after one warm-up. Target: record and search pages <= 150 ms at 100K. Run: "
        f"python -m benchmarks.inspector_bench --records {args.records}"))


if __name__ == "__main__":
    main()
