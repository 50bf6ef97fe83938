"""The bodies of ``retold retain`` and ``retold reembed``: they call :class:`Operations` (or
publish the re-embed for a worker) and print what happened. :mod:`retold.cli` parses the
arguments and builds the runtime.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from retold.runtime import Runtime

__all__ = ["reembed", "retain"]


def retain(rt: Runtime, actor: str) -> int:
    """Run every retention sweep and print one line per sweep."""
    result = rt.operations.retain(actor)
    config = rt.config
    print(f"blanked the transcripts of {result.sessions_blanked} sessions (extracted, ended more than"
          f" {config.sessions.retain_days} days ago)")
    print(f"deleted {result.search_logs_deleted} search_log rows older than"
          f" {config.retention.search_log_days} days")
    print(f"thinned the payloads of {result.event_payloads_thinned} events older than"
          f" {config.retention.event_payload_days} days to ids, outcomes and counts")
    if not result.wal_truncated:
        print("warning: another connection kept the WAL from being truncated; removed text may stay"
              " in it until the next checkpoint", file=sys.stderr)
    return 0


def reembed(rt: Runtime, model: str, version: str, dims: int | None, *, enqueue: bool, actor: str) -> int:
    """Re-embed here with a progress bar, or (``enqueue``) check that the re-embed would
    be accepted and hand it to a worker on the maintenance queue."""
    if enqueue:
        from retold.broker.maintenance import enqueue_reembed

        rt.operations.check_reembed(model, version, dims)  # refuse here, not in a worker's log
        task_id = enqueue_reembed(rt.config, model, version, dims)
        print(f"queued re-embedding with {model} version {version} as task {task_id} on the"
              f" {rt.config.queue.maintenance_queue} queue; a worker reports its progress as state"
              " PROGRESS (done/total) in Flower, and a re-run resumes where a stopped one left off")
        return 0

    def bar(done: int, total: int) -> None:
        width = 30
        filled = width if total == 0 else width * done // total
        sys.stderr.write(f"\rreembed [{'#' * filled}{'.' * (width - filled)}] {done}/{total}")
        sys.stderr.flush()

    result = rt.operations.reembed(model, version, dims=dims, progress=bar, actor=actor)
    sys.stderr.write("\n")
    resumed = f"; {result.resumed} were already done by a stopped run" if result.resumed else ""
    print(f"re-embedded {result.embedded} records with {result.model} version {result.version} "
          f"in {result.seconds:.1f} s ({result.records_per_second:.0f} records/s){resumed}; "
          f"dropped {result.dropped} old vectors")
    return 0
