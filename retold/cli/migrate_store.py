"""``retold migrate-store``: move a SQLite store into PostgreSQL and check the copy.

The copy itself is :func:`retold.store.transfer.move_store` (one transaction; refused into
a store that holds rows). The check that follows searches a sample of records on both
stores (:mod:`retold.retrieve.comparison`). The source runtime is built first, so a missing
embedding model or a store of another embedding family stops the command before anything
is written. See docs/decisions.md, "Moving a SQLite store into PostgreSQL".
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from retold.cli.common import EXIT_USAGE, Refused, add_command, cli_config, positive, print_json
from retold.config import Config, is_database_url

if TYPE_CHECKING:
    from retold.retrieve.comparison import SearchComparison
    from retold.store.transfer import TransferReport

__all__ = ["EXIT_MISMATCH", "register", "render"]

EXIT_MISMATCH = 4  # copied and committed, but the search check found a record PostgreSQL misses
TOP_K = 5


def _run(args: argparse.Namespace) -> int:
    from retold.retrieve.comparison import compare_searches
    from retold.runtime import build_runtime
    from retold.store.sampling import sample_records
    from retold.store.transfer import check_source, move_store

    if is_database_url(args.source):
        raise Refused("--from takes the SQLite store file to move, not a URL", EXIT_USAGE)
    if not is_database_url(args.target):
        raise Refused(f"--to takes a PostgreSQL URL (postgresql://user@host:5432/db), got {args.target!r}",
                      EXIT_USAGE)
    config = cli_config(args)
    timeout = config.store.busy_timeout_seconds
    check_source(args.source, timeout)
    with build_runtime(_store(config, path=args.source)) as source:
        report = move_store(args.source, args.target, busy_timeout_seconds=timeout)
        searcher = source.comparison_retriever()
        with build_runtime(_store(config, url=args.target), embedder=source.embedder,
                           reranker=searcher.reranker) as target:
            samples = sample_records(source.store, args.sample, source.clock.now())
            comparison = compare_searches(samples, source.store, searcher.search,
                                          target.comparison_retriever().search, k=TOP_K)
    if args.json:
        print_json(as_dict(report, comparison))
    else:
        print(render(report, comparison))
    if not comparison.ok:
        print(f"retold migrate-store: {len(comparison.lost)} sampled records found in SQLite's top"
              f" {TOP_K} are missing from PostgreSQL's; the copy is committed, inspect them with"
              " `retold search` before using the new store", file=sys.stderr)
        return EXIT_MISMATCH
    return 0


def _store(config: Config, *, path: str | None = None, url: str | None = None) -> Config:
    """``config`` opening one side of the move, read-only: the check searches, never writes."""
    store = replace(config.store, path=path or config.store.path, url=url, read_only=True)
    return replace(config, store=store)


def as_dict(report: TransferReport, comparison: SearchComparison) -> dict[str, Any]:
    """What ``--json`` prints: the same facts as the table."""
    return {
        "source": report.source, "target": report.target, "seconds": round(report.seconds, 3),
        "records_version": report.records_version, "sequences_advanced": report.sequences_advanced,
        "tables": [{"table": c.table, "sqlite": c.source, "postgres": c.target, "rebuilt": c.rebuilt,
                    "ok": c.ok} for c in report.tables],
        "search": {
            "k": comparison.k, "sampled": len(comparison.samples), "unreadable": comparison.unreadable,
            "agreeing": comparison.agreeing, "found_in_both": comparison.found_in_both,
            "only_postgres": comparison.gained, "mean_overlap": round(comparison.mean_overlap, 3),
            "lost": [{"record_id": s.record_id, "query": s.query, "sqlite": list(s.source_ids),
                      "postgres": list(s.target_ids)} for s in comparison.lost],
            "ok": comparison.ok,
        },
        "ok": comparison.ok,
    }


def render(report: TransferReport, comparison: SearchComparison) -> str:
    """The move as a short table: rows per table on each side, then the search check."""
    lines = [f"moved {report.source} -> {report.target}: {report.rows} rows in {report.seconds:.1f} s,"
             f" records_version {report.records_version}"]
    width = max(len(c.table) for c in report.tables) + len(" (rebuilt)")
    lines.append(f"  {'table':<{width}} {'sqlite':>9} {'postgres':>9}")
    for c in report.tables:
        name = f"{c.table} (rebuilt)" if c.rebuilt else c.table
        lines.append(f"  {name:<{width}} {c.source:>9} {c.target:>9}")
    lines.append(
        f"search check, top {comparison.k} of {len(comparison.samples)} sampled records:"
        f" {comparison.agreeing} agree ({comparison.found_in_both} found by both),"
        f" {len(comparison.lost)} missing from PostgreSQL, {comparison.gained} found only by"
        f" PostgreSQL; mean overlap of the top lists {comparison.mean_overlap:.2f}"
        + (f"; {comparison.unreadable} sampled records had no reader" if comparison.unreadable else ""))
    lines += [f"  missing: {s.record_id} (query {s.query!r})" for s in comparison.lost]
    return "\n".join(lines)


def register(commands: Any) -> None:
    """Add ``migrate-store`` to the ``retold`` parser."""
    sub = add_command(
        commands, "migrate-store", _run, "move a SQLite store into an empty PostgreSQL store",
        "Copy every row of a SQLite store (at the latest schema; run `retold migrate` first) into a"
        " PostgreSQL database in one transaction, keeping ids, seq numbers and versions, and rebuild"
        " the lexical index there. Refused, with nothing written, when the PostgreSQL store holds any"
        " rows. Then checks the copy: row counts per table must be equal (else nothing is committed),"
        f" and a sample of records is searched on both stores; a record SQLite finds in its top {TOP_K}"
        f" that PostgreSQL does not exits {EXIT_MISMATCH}. The SQLite file is only read. Stop agents"
        " and workers first: writes made during the copy stay behind.")
    sub.add_argument("--from", dest="source", required=True, metavar="PATH",
                     help="the SQLite store file to move")
    sub.add_argument("--to", dest="target", required=True, metavar="URL",
                     help="the PostgreSQL store (postgresql://user:password@host:5432/db); its schema is"
                          " created when the database is empty")
    sub.add_argument("--sample", type=positive, default=50, metavar="N",
                     help="records to search for on both stores (default 50)")
    sub.add_argument("--json", action="store_true", help="print the report as JSON")
