"""Tenant-scale benchmark: one store of many 1K-record tenants, and one tenant with a 100K
shared scope, measured from an agent process that serves ten of them.

The store grows from 10 tenants (10K records) to 100 (100K) and ``--tenants`` (default
1,000: 1M records). Each tenant holds the search benchmark's synthetic 1K-record store
(``benchmarks/search_data.py``; the searching principal reads about 10% of it). Bulk
loading bypasses the write path: one tenant is written through the store, and the others
are copies of its file (a SQLite tenant is a file of its own; PostgreSQL: below). At each
size a fresh agent process opens ten tenants spread over the store, with the packaged
encoder loaded (its memory counts) and the fake embedder answering the searches (so the
timings are the store's and the index's, not the model's), and reports:

- write p50/p95: ``memory_write`` through the tools, its ``total`` minus ``embed``;
- search p50/p95: ``memory_search`` through the tools, every stage except the encoder's
  (``total - embed_wait - embed_names``);
- cold tenant: ``build_runtime`` for a tenant this process has not opened, then its first
  search, minus the encoder;
- refresh: another process writes one record into a served tenant; the time this process's
  index takes to catch up by delta;
- RSS of the process after all of it, and the vectors its indexes hold;
- a memory budget: the same process then serves ``POOL_TENANTS`` more tenants, one search
  each, through :class:`~retold.tenant_runtimes.TenantRuntimes` under a ``POOL_MB`` budget,
  and reports how many runtimes it still holds and the bytes of their vectors.

At the largest size the same process also opens the tenant ``big``, whose one project
scope holds ``--big`` records (default 100K), all readable by the principal, and searches
it. Targets (issue "a million memories and a thousand tenants"): at 1M, write p50 <= 1.2x
its value at 10K, search p50 <= 5 ms in a 1K tenant and <= 15 ms in the 100K scope, a
cold tenant's first search <= 100 ms, RSS of the process serving ten tenants <= 400 MB.

``--backend postgres`` measures the same on PostgreSQL (a server at ``--pg``, default the
machine's at 127.0.0.1:5432, in a database the benchmark creates and drops unless
``--keep-database`` leaves it for EXPLAIN), where every tenant's rows share one set of
tables under row-level security keyed by a ``tenant`` column. There one tenant is
written through the store, and the others are copies of its rows made in SQL
(``benchmarks/pg_tenant_copies.py``: the tenant column replaced and the ids rewritten per
copy), added as the store grows; the big tenant is written through the store; the
database is vacuumed and analysed before each size is measured, as autovacuum would
have. RSS is the agent process's only, not the server's.

Run: ``.venv/bin/python -m benchmarks.tenant_scale_bench [--tenants 1000] [--big 100000]
[--backend postgres]``. Writes tenant_scale.json and .md (SQLite) or tenant_scale_postgres.json
and .md into ``--results-dir`` (benchmarks/results).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.report import RESULTS, machine, pin_threads, summarize, write_report

pin_threads()


from benchmarks.pg_tenant_copies import analyze, copy_tenant  # noqa: E402
from benchmarks.scale_bench import refresh_ms  # noqa: E402
from benchmarks.search_data import (  # noqa: E402
    PROJECTS,
    fake_vectors,
    generate,
    make_queries,
    populate,
    principal,
)
from retold import build_runtime, load_config  # noqa: E402
from retold.config import is_database_url  # noqa: E402
from retold.index.embedder import FakeEmbedder  # noqa: E402
from retold.ingest.equivalence import ExactJudge  # noqa: E402
from retold.models import Scope  # noqa: E402
from retold.runtime import Runtime  # noqa: E402
from retold.store.location import add_tenant, tenant_store_path  # noqa: E402
from retold.tenant_runtimes import TenantRuntimes  # noqa: E402

TENANT_RECORDS = 1000
SERVED = 10  # tenants one agent process serves
POOL_TENANTS = 100  # tenants served one after another under a memory budget
POOL_MB = 16.0  # the budget: room for about ten 1K-record tenants' vectors
BIG = "big"


def _tenant(i: int) -> str:
    return f"t{i:04d}"


def _runtime(target: str, tenant: str) -> Runtime:
    key = "url" if is_database_url(target) else "path"
    config = load_config(overrides={"store": {key: target}, "embedding": {"model": "fake"},
                                    "retrieval": {"search_log": {"writes": "background"}}})
    return build_runtime(config, embedder=FakeEmbedder(), judge=ExactJudge(), tenant=tenant)


def _populate(target: str, tenant: str, records: list[dict[str, Any]]) -> None:
    """``records`` written into ``tenant`` through the store (analysed as it grows on
    PostgreSQL, where the plans cached while the tables were small would otherwise stay)."""
    add_tenant(target, tenant)
    vectors = fake_vectors([str(r["content"]) for r in records], FakeEmbedder())

    def analysed() -> None:
        analyze(target)

    with _runtime(target, tenant) as rt:
        populate(rt, records, vectors, after_batch=analysed if is_database_url(target) else None)


def _build(target: str, tenants: int, big: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The store with tenant ``t0000`` of 1K records (and on SQLite its ``tenants`` - 1
    copies) and the big tenant; the specs of a tenant's records and of the big scope's,
    for the queries."""
    _runtime(target, "default").close()
    records = generate(TENANT_RECORDS)
    _populate(target, _tenant(0), records)
    if not is_database_url(target):  # PostgreSQL's copies are made as the store grows
        first = tenant_store_path(target, _tenant(0))
        started = time.perf_counter()
        for i in range(1, tenants):
            shutil.copyfile(first, tenant_store_path(target, _tenant(i)))
        print(f"{tenants} tenants of {TENANT_RECORDS} records in {time.perf_counter() - started:.0f} s "
              "(copies of one)", flush=True)
    # The big tenant: every record in one project scope the principal's user belongs to.
    shared = Scope("project", PROJECTS[0])
    big_records = [{**spec, "scope": shared} for spec in generate(big, seed=23)]
    started = time.perf_counter()
    _populate(target, BIG, big_records)
    print(f"tenant {BIG}: {big:,} records in one scope in {time.perf_counter() - started:.0f} s", flush=True)
    return records, big_records


def _grow(target: str, present: int, n: int) -> None:
    """The store at size ``n`` (it holds ``present``): the first ``n`` tenants, and the
    big one."""
    if is_database_url(target):
        if n > present:
            seconds = copy_tenant(target, _tenant(0), [(_tenant(i), i) for i in range(present, n)])
            print(f"{n} tenants: {n - present} copies of {TENANT_RECORDS} records in {seconds:.0f} s, "
                  f"vacuum analyze in {analyze(target, vacuum=True):.0f} s", flush=True)
        return
    folder = tenant_store_path(target, _tenant(0)).parent
    for file in folder.glob("t*.sqlite"):
        if int(file.stem[1:]) >= n:
            file.rename(file.with_suffix(".parked"))
    for file in folder.glob("t*.parked"):
        if int(file.stem[1:]) < n:
            file.rename(file.with_suffix(".sqlite"))


def _rss_mb() -> float:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _search_ms(rt: Runtime, queries: list[str]) -> float:
    result = rt.tools.call("memory_search", principal(), {"queries": queries})
    assert "error" not in result, result
    return _non_embedding(result["timings_ms"])


def _non_embedding(timings: dict[str, Any]) -> float:
    """A search's own time: everything but waiting for the encoder."""
    waited = float(timings.get("embed_wait", 0.0)) + float(timings.get("embed_names", 0.0))
    return float(timings["total"]) - waited


def _write_ms(rt: Runtime, tag: str, i: int) -> float:
    result = rt.tools.call("memory_write", principal(), {
        "type": "semantic", "attribute": f"scale_{tag}_{i}", "source_kind": "user_statement",
        "content": f"Priya's {tag} runbook step {i} uses port {4000 + i}.",
        "evidence": f"runbook step {i} uses port {4000 + i}"})
    assert "error" not in result, result
    timings = result["timings_ms"]
    return float(timings["total"]) - float(timings.get("embed", 0.0))


def _agent(target: str, tenants: int, queries: list[list[str]], big_queries: list[list[str]] | None,
           rounds: int, out: Any) -> None:
    """One agent process: ten tenants spread over the store, then a cold one, then (when
    asked) the big tenant."""
    from retold.index.embedder import embedder_from_config

    model = embedder_from_config(load_config().embedding)
    model.embed_queries(["load the packaged encoder"])
    served = [_tenant(i * tenants // SERVED) for i in range(SERVED)]
    runtimes = {tenant: _runtime(target, tenant) for tenant in served}
    for rt in runtimes.values():
        rt.hooks.on_session_start(principal())
        _search_ms(rt, queries[0])  # warm: index loaded, log writer up
    search: list[float] = []
    write: list[float] = []
    refresh: list[float] = []
    for i in range(rounds):
        for j, (tenant, rt) in enumerate(runtimes.items()):
            search.append(_search_ms(rt, queries[(i * SERVED + j) % len(queries)]))
            if j % 2 == 0:
                write.append(_write_ms(rt, tenant, i))
            if i % 5 == 0 and j == 0:
                refresh.append(refresh_ms(rt, target, i, tenant))
    for rt in runtimes.values():
        rt.flush_search_log()
    rss_served = _rss_mb()
    vectors = sum(len(rt.index) for rt in runtimes.values())
    cold = []
    for i in range(3):
        tenant = _tenant(i * tenants // SERVED + 1)
        started = time.perf_counter()
        rt = _runtime(target, tenant)
        rt.hooks.on_session_start(principal())
        result = rt.tools.call("memory_search", principal(), {"queries": queries[i]})
        elapsed = (time.perf_counter() - started) * 1000
        cold.append(elapsed - float(result["timings_ms"]["total"]) + _non_embedding(result["timings_ms"]))
        rt.close()
    report: dict[str, Any] = {
        "tenants": tenants, "records": tenants * TENANT_RECORDS, "served": served,
        "search_ms": summarize(search), "write_ms": summarize(write), "refresh_ms": summarize(refresh),
        "cold_first_search_ms": round(statistics.median(cold), 2), "rss_mb_serving_ten": round(rss_served, 1),
        "vectors_held": vectors,
    }
    for rt in runtimes.values():
        rt.close()
    report["budget"] = _budget(target, tenants, queries)
    if big_queries is not None:
        with _runtime(target, BIG) as rt:
            rt.hooks.on_session_start(principal())
            started = time.perf_counter()
            _search_ms(rt, big_queries[0])
            report["big_first_search_ms"] = round((time.perf_counter() - started) * 1000, 1)
            # The first search loads the index and starts building its approximate graph in
            # the background; the steady state is measured once the graph is ready.
            ready = rt.index.wait_for_graph(timeout=900)
            graph_s = round(time.perf_counter() - started, 1)
            before = rt.index.approximate_searches
            big = [_search_ms(rt, q) for q in big_queries[1:]]
            big_writes = [_write_ms(rt, BIG, i) for i in range(len(big_queries) // 2)]
            report["big"] = {"records": len(rt.index), "search_ms": summarize(big),
                             "write_ms": summarize(big_writes), "graph_ready": ready,
                             "graph_ready_s": graph_s if ready else None,
                             "approximate_searches": rt.index.approximate_searches - before}
            rt.flush_search_log()
        report["rss_mb_with_big"] = round(_rss_mb(), 1)
    out.put(json.dumps(report))


def _budget(target: str, tenants: int, queries: list[list[str]]) -> dict[str, Any]:
    """Serve ``POOL_TENANTS`` tenants in turn, one search each, under ``POOL_MB``: what the
    process still holds afterwards."""
    pool = TenantRuntimes(lambda name, _home: _runtime(target, name or _tenant(0)), POOL_MB)
    step = max(1, tenants // POOL_TENANTS)
    served = [_tenant(i * step) for i in range(min(POOL_TENANTS, tenants))]
    for i, tenant in enumerate(served):
        with pool.lease(tenant) as rt:
            rt.hooks.on_session_start(principal())
            _search_ms(rt, queries[i % len(queries)])
    held = {"served": len(served), "held": len(pool.held()), "held_mb": round(pool.held_bytes() / 2**20, 1),
            "closed": pool.evicted, "budget_mb": POOL_MB, "rss_mb": round(_rss_mb(), 1)}
    pool.close()
    return held


def _measure(target: str, tenants: int, queries: list[list[str]], big_queries: list[list[str]] | None,
             rounds: int) -> dict[str, Any]:
    context = multiprocessing.get_context("spawn")  # a fresh process: its memory is its own
    out = context.Queue()
    process = context.Process(target=_agent, args=(target, tenants, queries, big_queries, rounds, out))
    process.start()
    report = json.loads(out.get(timeout=3600))
    process.join()
    return dict(report)


def _run(target: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    """Build the store at ``target``, then grow it size by size, measuring each."""
    sizes = [n for n in (10, 100, 1000) if n < args.tenants] + [args.tenants]
    records, big_records = _build(target, args.tenants, args.big)
    queries = make_queries(records, 100)
    big_queries = make_queries(big_records, 101, seed=29)
    results: list[dict[str, Any]] = []
    present = 1
    for n in sizes:
        _grow(target, present, n)
        present = n
        results.append(_measure(target, n, queries, big_queries if n == sizes[-1] else None, args.rounds))
        row = results[-1]
        print(f"{n} tenants: search p50 {row['search_ms']['p50']} ms, write p50 "
              f"{row['write_ms']['p50']} ms, RSS {row['rss_mb_serving_ten']} MB", flush=True)
    return results


def _on_postgres(server: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    """The run in a database of its own on ``server``, dropped afterwards."""
    import psycopg

    name = f"retold_tenant_scale_{os.getpid()}"
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {name}")
        admin.execute(f"CREATE DATABASE {name}")
        try:
            return _run(f"{server.rsplit('/', 1)[0]}/{name}", args)
        finally:
            if args.keep_database:
                print(f"database {name} kept: drop it when done", flush=True)
            else:
                admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tenants", type=int, default=1000, help="tenants of 1K records at the largest size")
    parser.add_argument("--big", type=int, default=100_000, help="records in the big tenant's one scope")
    parser.add_argument("--rounds", type=int, default=15, help="searches per served tenant per size")
    parser.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--pg", default=os.environ.get("RETOLD_BENCH_PG",
                                                       "postgresql://postgres@127.0.0.1:5432/postgres"),
                        help="a PostgreSQL server URL the benchmark may create a database on")
    parser.add_argument("--keep-database", action="store_true",
                        help="leave the PostgreSQL database for inspection (EXPLAIN) instead of dropping it")
    parser.add_argument("--results-dir", type=Path, default=RESULTS)
    args = parser.parse_args()
    if args.backend == "postgres":
        results = _on_postgres(args.pg, args)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            results = _run(str(Path(tmp) / "store.sqlite"), args)
    _report(results, args)


def _report(results: list[dict[str, Any]], args: argparse.Namespace) -> None:
    first, last = results[0], results[-1]
    big = last.get("big", {})
    targets = [
        ("write p50 at the largest size / at 10 tenants",
         last["write_ms"]["p50"] / first["write_ms"]["p50"], 1.2),
        ("search non-embedding p50 in a 1K tenant at the largest size, ms", last["search_ms"]["p50"], 5.0),
        (f"search non-embedding p50 in the {args.big:,}-record scope, ms",
         big.get("search_ms", {}).get("p50"), 15.0),
        ("a cold tenant's first search (build_runtime + search, no encoder), ms",
         last["cold_first_search_ms"], 100.0),
        ("RSS of the process serving ten tenants, model loaded, MB", last["rss_mb_serving_ten"], 400.0),
    ]
    table = [["tenants (records)", "write p50/p95 ms", "search non-embed p50/p95 ms", "refresh p50/p95 ms",
              "cold tenant first search ms", "RSS serving 10 tenants MB", "vectors held"]]
    for row in results:
        table.append([f"{row['tenants']:,} ({row['records']:,})",
                      f"{row['write_ms']['p50']:.2f} / {row['write_ms']['p95']:.2f}",
                      f"{row['search_ms']['p50']:.2f} / {row['search_ms']['p95']:.2f}",
                      f"{row['refresh_ms']['p50']:.2f} / {row['refresh_ms']['p95']:.2f}",
                      f"{row['cold_first_search_ms']:.1f}", f"{row['rss_mb_serving_ten']:.0f}",
                      f"{row['vectors_held']:,}"])
    graph = (f"The big tenant's approximate graph was ready {big['graph_ready_s']} s after its first "
             f"search; the measured searches and writes made {big['approximate_searches']} dense "
             "searches through it. " if big.get("graph_ready") else
             "The big tenant's approximate graph was not used (faiss missing or not ready). " if big else "")
    budget = last["budget"]
    notes_budget = (f"Memory budget: after serving {budget['served']} tenants one search each under "
                    f"`index.max_ram_mb` = {budget['budget_mb']:g}, the process held {budget['held']} "
                    f"runtimes ({budget['held_mb']} MB of vectors; {budget['closed']} closed), RSS "
                    f"{budget['rss_mb']:.0f} MB.")
    if big:
        table.append([f"{BIG}: one scope of {big['records']:,}",
                      f"{big['write_ms']['p50']:.2f} / {big['write_ms']['p95']:.2f}",
                      f"{big['search_ms']['p50']:.2f} / {big['search_ms']['p95']:.2f}", "-",
                      f"{last['big_first_search_ms']:.1f}", f"{last['rss_mb_with_big']:.0f} (with it)", "-"])
    met = ["Targets:", ""] + [
        f"- {name} <= {limit:g}: " + ("n/a" if value is None else
                                      f"{value:.3f} -> **{'met' if value <= limit else 'NOT met'}**")
        for name, value, limit in targets]
    postgres = args.backend == "postgres"
    common = ("one agent process per size serving ten tenants spread over the store, the packaged "
              "encoder loaded (its memory counts in RSS) and the fake embedder answering (timings "
              "exclude the encoder). ")
    how = ("PostgreSQL, all tenants in one set of tables under row-level security; " + common
           + "Tenants are copies of one 1K-record tenant's rows made in SQL (ids rewritten per "
           "copy), added as the store grew, then VACUUM ANALYZE; the big tenant was written "
           "through the store. RSS is the agent process's, not the server's."
           if postgres else "SQLite; " + common + "Tenants are copies of one 1K-record tenant's "
           "file; the big tenant was written through the store.")
    write_report("tenant_scale_postgres" if postgres else "tenant_scale",
                 {"machine": machine(), "backend": args.backend, "sizes": results,
                  "targets": [[name, value, limit] for name, value, limit in targets]}, table,
                 notes="\n".join(met) + "\n\n" + graph + notes_budget + "\n\n" + how,
                 directory=args.results_dir)


if __name__ == "__main__":
    main()
