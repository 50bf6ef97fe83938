"""``retold check``: whether a store is whole, as a report and an exit code.

The command opens the store itself rather than through a runtime: a store too damaged for
a runtime to open, or one whose embedding model is not installed here, can still be
checked. It changes nothing in the store; on a SQLite file it sets or clears the damage
mark beside it (:mod:`retold.store.damage`). A SQLite file gets SQLite's page checks, the FTS index check
and the agreement check; a PostgreSQL store gets the agreement check and amcheck's btree
index check where the database has that extension. See docs/decisions.md, "Integrity
checks".
"""

from __future__ import annotations

import argparse
from typing import Any

from retold.cli.common import add_command, cli_config
from retold.errors import StoreError, StoreMissingError
from retold.ingest.equivalence import judge_note
from retold.store.damage import damage_noted
from retold.store.integrity import IntegrityReport
from retold.store.location import check_store_at, missing_store, tenant_exists, tenant_store_path

__all__ = ["EXIT_PROBLEMS", "register", "render"]

EXIT_PROBLEMS = 4  # the check ran and found problems (1 stays "could not check at all")

def register(commands: Any) -> None:
    """Add ``check`` to the ``retold`` parser."""

    def run(args: argparse.Namespace) -> int:
        config = cli_config(args)
        wait = config.store.busy_timeout_seconds
        target = config.store.target
        if not config.store.url:
            path = config.store.path
            if path == ":memory:":
                raise StoreError("an in-memory store has no file to check")
            missing = missing_store(path)
            if missing is not None:
                raise StoreMissingError(missing)
            # On SQLite each tenant is a file of its own, and the check reads one file.
            tenant = config.tenancy.tenant
            if not tenant_exists(path, tenant):
                raise StoreMissingError(f"no tenant {tenant!r} in store {path}")
            target = str(tenant_store_path(path, tenant))
        report = check_store_at(target, quick=args.quick, busy_timeout=wait)
        print(render(report))
        # Said here once, rather than on every command that writes: a fresh install runs
        # with the exact judge, and that is a setup choice, not a failure.
        print(judge_note(config.ingestion.equivalence))
        return 0 if report.ok else EXIT_PROBLEMS

    check = add_command(
        commands, "check", run, "check the store for damage and disagreement",
        "On a SQLite file, run SQLite's integrity check (quick_check with --quick) and the"
        " full-text index check; on PostgreSQL, amcheck's bt_index_check on the store's btree"
        " indexes when the database has the amcheck extension (skipped, and said so, when it"
        " has not). On both, the agreement check: every active record has one lexical (FTS) row"
        " and one vector of the store's embedding family; no lexical row or vector without its"
        " record. Prints each problem with the records it names and exits"
        f" {EXIT_PROBLEMS} when there is any. Changes nothing in the store; on SQLite, damage leaves"
        " a -damaged mark beside the file that stops every writer, and a passing check removes"
        " it. On SQLite the full-text check"
        " holds the write lock while it runs. Last, names the equivalence judge writes use and, when"
        " its NLI model is not on this machine, how to get it.")
    check.add_argument("--quick", action="store_true",
                       help="SQLite's quick_check instead of the full integrity_check (skips "
                            "comparing each index with its table; about 0.7 s instead of 1.7 s at "
                            "50K records); on PostgreSQL, bt_index_check without heapallindexed "
                            "(each index's structure, not that it holds every table row)")


def render(report: IntegrityReport) -> str:
    """The report as lines: a headline, then one line per problem and per skipped check."""
    ran = ", ".join(report.checks)
    total = sum(report.timings_ms.values())
    waiting = f", {report.pending_vectors} waiting for their vector" if report.pending_vectors else ""
    lines = [f"{report.path}: {report.summary()} ({ran}; {report.active_records} active records{waiting};"
             f" {total:.0f} ms)"]
    lines += [f"  {finding.problem}: {finding.detail}" for finding in report.findings]
    lines += [f"  skipped {why}" for why in report.skipped]
    if report.damaged and damage_noted(report.path) is not None:
        lines.append("  writes to this store are refused until a check passes; restore it from a snapshot")
    if report.mark_cleared:
        lines.append("  the store was marked damaged; this check passed, so writes are taken again")
    return "\n".join(lines)
