"""Two checkouts compared on the scale benchmark's write and search, operation by operation.

A change's cost to the write and search paths is often a few percent, less than what other
work on a shared machine moves one run by, so two runs one after the other do not compare.
Here each checkout serves from a process of its own, on its own code (``PYTHONPATH`` is the
checkout): per backend (PostgreSQL, and SQLite as the yardstick) one process of ``--before``
and one of ``--after`` load the same synthetic store (``benchmarks/search_data.py``, fake
embedder; PostgreSQL vacuumed and analysed as ``benchmarks.scale_bench`` does), then all of
them take turns, one operation each: the same ``memory_search`` (p50/p95 of every stage but
the query embedding), then the same ``Ingestor.write`` of a new memory (its total less the
embedding), the order of the two checkouts swapped at every step. Noise then hits both
sides alike. A round is one such run on fresh stores; the figure is the ratio of the
medians over the rounds (after / before), with each round's own ratio beside it.

SQLite is the yardstick: a change to the PostgreSQL store alone should leave SQLite's ratios
at 1 within the rounds' spread, and where the two checkouts differ in more than that change,
SQLite's ratio shows what the rest of the difference costs on the shared path.

Each checkout needs ``benchmarks/scale_bench.py`` and ``benchmarks/search_data.py`` as they
have been since the scale benchmark was added (the helpers each process calls). Each
PostgreSQL process creates a database of its own on ``--pg`` and drops it when it is done.

Run, from the checkout that is ``--after`` (``git worktree add --detach ../before <commit>``
makes the other)::

    .venv/bin/python -m benchmarks.scale_ab --before ../before [--rounds 3] [--sizes 10000] [--queries 200]

Writes scale_ab.json and scale_ab.md into ``--results-dir`` (benchmarks/results); each side
is named by its commit, never by its path.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import IO, Any

from benchmarks.report import RESULTS, machine, summarize, write_report

SIDES = ("before", "after")
BACKENDS = ("postgres", "sqlite")
KINDS = ("search", "write")
PG_DEFAULT = "postgresql://postgres@127.0.0.1:5432/postgres"


# -- one side: a process on one checkout's code ------------------------------------------


def _serve(backend: str, size: int, queries: int, pg: str) -> None:
    """Load a store, say ``ready``, then answer ``search I`` / ``write I`` with the ms it
    took, until ``quit``. Imports the checkout's own benchmark helpers."""
    from benchmarks import scale_bench
    from benchmarks.scale_concurrency import bench_runtime
    from benchmarks.search_data import fake_vectors, generate, make_queries, populate, principal
    from retold.index.embedder import FakeEmbedder

    records = generate(size)
    vectors = fake_vectors([str(r["content"]) for r in records], FakeEmbedder())
    searches = make_queries(records, queries)
    with tempfile.TemporaryDirectory() as tmp:
        admin = None
        if backend == "postgres":
            import psycopg

            name = f"retold_ab_{os.getpid()}"
            admin = psycopg.connect(pg, autocommit=True)
            admin.execute(f"CREATE DATABASE {name}")
            target = f"{pg.rsplit('/', 1)[0]}/{name}"
        else:
            target = str(Path(tmp) / "ab.sqlite")
        try:
            rt = bench_runtime(target)
            populate(rt, records, vectors,
                     after_batch=(lambda: scale_bench._analyze(target)) if admin else None)
            if admin:
                scale_bench._vacuum(target)
            rt.refresh_index()
            rt.hooks.on_session_start(principal())
            print("ready", flush=True)
            for line in sys.stdin:
                kind, i = line.split()
                if kind == "search":
                    ms: Any = scale_bench._search_ms(rt, searches[int(i)])
                elif kind == "write":
                    ms = scale_bench._write_ms(rt, int(i))
                    ms = ms["write"] if isinstance(ms, dict) else ms  # later checkouts add stages
                else:
                    break
                print(f"{float(ms):.4f}", flush=True)
            rt.close()
        finally:
            if admin:
                admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
                admin.close()


# -- the comparison ------------------------------------------------------------------------


class _Side:
    """A serving process on one checkout and backend."""

    def __init__(self, checkout: Path, backend: str, args: argparse.Namespace) -> None:
        # -P: the checkout's benchmarks package, not this file's folder, comes first on the path
        command = [sys.executable, "-P", str(Path(__file__).resolve()), "--serve", backend,
                   "--sizes", str(args.sizes), "--queries", str(args.queries), "--pg", args.pg]
        env = {**os.environ, "PYTHONPATH": str(checkout)}
        self.process = subprocess.Popen(command, cwd=checkout, env=env, stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True)
        self.samples: dict[str, list[float]] = {kind: [] for kind in KINDS}

    def _pipes(self) -> tuple[IO[str], IO[str]]:
        assert self.process.stdin is not None and self.process.stdout is not None
        return self.process.stdin, self.process.stdout

    def ready(self) -> None:
        line = self._pipes()[1].readline()
        if line.strip() != "ready":
            raise RuntimeError(f"a serving process failed to load its store (exit {self.process.wait()})")

    def time(self, kind: str, i: int) -> None:
        stdin, stdout = self._pipes()
        stdin.write(f"{kind} {i}\n")
        stdin.flush()
        self.samples[kind].append(float(stdout.readline()))

    def close(self) -> None:
        if self.process.poll() is None:
            self._pipes()[0].write("quit 0\n")
            self._pipes()[0].close()
        self.process.wait()


def _round(checkouts: dict[str, Path], args: argparse.Namespace, n: int) -> dict[str, Any]:
    sides: dict[tuple[str, str], _Side] = {}
    try:
        for backend in BACKENDS:
            for side in SIDES:  # loaded one at a time: a load would slow the others' loads
                sides[backend, side] = _Side(checkouts[side], backend, args)
                sides[backend, side].ready()
        for i in range(args.queries):
            order = SIDES if (i + n) % 2 == 0 else SIDES[::-1]
            for backend in BACKENDS:
                for side in order:
                    sides[backend, side].time("search", i)
                    sides[backend, side].time("write", i)
    finally:
        for process in sides.values():
            process.close()
    return {backend: {side: {kind: summarize(sides[backend, side].samples[kind]) for kind in KINDS}
                      for side in SIDES} for backend in BACKENDS}


def _commit(checkout: Path) -> str:
    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=checkout, check=True,
                          capture_output=True, text=True).stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", type=Path, help="the checkout compared against")
    parser.add_argument("--after", type=Path, default=Path.cwd(), help="the checkout measured (this one)")
    parser.add_argument("--rounds", type=int, default=3, help="runs on fresh stores")
    parser.add_argument("--sizes", type=int, default=10_000, help="records in each store (one size)")
    parser.add_argument("--queries", type=int, default=200, help="searches, and writes, per side and round")
    parser.add_argument("--pg", default=os.environ.get("RETOLD_BENCH_PG", PG_DEFAULT),
                        help="a PostgreSQL server URL the benchmark may create databases on")
    parser.add_argument("--results-dir", type=Path, default=RESULTS)
    parser.add_argument("--serve", choices=BACKENDS, help=argparse.SUPPRESS)  # one side's process
    args = parser.parse_args()
    if args.serve:
        _serve(args.serve, args.sizes, args.queries, args.pg)
        return
    if args.before is None:
        parser.error("--before is required")
    checkouts = {"before": args.before.resolve(), "after": args.after.resolve()}
    commits = {side: _commit(path) for side, path in checkouts.items()}
    rounds = []
    for n in range(args.rounds):
        rounds.append(_round(checkouts, args, n))
        print(f"round {n + 1}: " + "; ".join(
            f"{backend} {kind} p50 {rounds[-1][backend]['before'][kind]['p50']:.2f}"
            f" -> {rounds[-1][backend]['after'][kind]['p50']:.2f}"
            for backend in BACKENDS for kind in KINDS), flush=True)

    def figures(backend: str, side: str, kind: str, stat: str) -> list[float]:
        return [r[backend][side][kind][stat] for r in rounds]

    table = [["backend", "figure, ms", f"before ({commits['before']}), per round",
              f"after ({commits['after']}), per round", "each round's ratio", "ratio of medians"]]
    ratios: dict[str, dict[str, float]] = {backend: {} for backend in BACKENDS}
    for backend in BACKENDS:
        for kind in KINDS:
            for stat in ("p50", "p95"):
                before, after = (figures(backend, side, kind, stat) for side in SIDES)
                ratio = statistics.median(after) / statistics.median(before)
                ratios[backend][f"{kind} {stat}"] = round(ratio, 3)
                table.append([backend, f"{kind} {stat}", " / ".join(f"{v:.2f}" for v in before),
                              " / ".join(f"{v:.2f}" for v in after),
                              " / ".join(f"{a / b:.2f}" for a, b in zip(after, before, strict=True)),
                              f"{ratio:.2f}"])
    write_report("scale_ab", {"machine": machine(), "commits": commits, "records": args.sizes,
                              "queries": args.queries, "rounds": rounds, "ratios": ratios}, table,
                 notes=f"{args.rounds} rounds; in each, both checkouts serve {args.sizes:,}-record stores"
                       f" and take turns at {args.queries} searches and writes, operation by operation"
                       " (fake embedder; the embedding excluded). Ratios are after / before.",
                 directory=args.results_dir)
    print((args.results_dir / "scale_ab.md").read_text())


if __name__ == "__main__":
    main()
