"""``retold retry``: give failed, parked or blocked sessions back to the workers.

A session whose extraction failed waits for its backoff, one that failed
``ingestion.extraction_max_attempts`` times is parked, and one that found no hosted
model waits until a process with another model setup looks at it. After the operator
fixes the cause, ``retry`` forgets those attempts and hands each session to the
configured scheduler at once (``retold extract`` instead runs it in the calling process).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from retold.cli.common import SESSION_ID_HELP, add_command, cli_runtime, resolve_session_id

if TYPE_CHECKING:
    from retold.runtime import Runtime

__all__ = ["register"]


def register(commands: Any) -> None:
    """Add ``retry`` to the ``retold`` subcommands."""

    def run(args: argparse.Namespace) -> int:
        with cli_runtime(args) as rt:
            # Every id resolved before the first is retried: an ambiguous one changes nothing.
            for session in [resolve_session_id(rt.store, text) for text in args.session_ids]:
                print(retry(rt, session))
        return 0

    parser = add_command(commands, "retry", run, "hand failed or parked sessions back to the workers",
                     "Forget the failed attempts of each ended, unextracted session (parked or not,"
                     " or blocked for want of a hosted model) and hand it to the configured scheduler"
                     " now. When the queue is unreachable it stays due and the recover sweep hands it"
                     " over. Fails on a session that is not ended, already extracted, or unknown.")
    parser.add_argument("session_ids", nargs="+", metavar="SESSION", help=SESSION_ID_HELP)


def retry(rt: Runtime, session_id: str) -> str:
    """Reset one session's attempts and schedule it; return the line to print. Raises
    ValueError for a session that is not ended and unextracted."""
    if not rt.session_end.reset(session_id):
        raise ValueError(f"{session_id} is not an ended session waiting for extraction")
    from retold.ingest.session import is_deferred

    if not is_deferred(rt.scheduler):  # queue.scheduler: in_process runs it here and now
        rt.hooks.schedule(session_id)
        row = rt.store.get_session(session_id)
        done = row is not None and row.extracted_at is not None
        return (f"{session_id}: attempts reset, run in this process: "
                + ("extracted" if done else f"not extracted ({row and row.last_error})"))
    if rt.hooks.schedule(session_id):
        return f"{session_id}: attempts reset, queued for a worker"
    return f"{session_id}: attempts reset; the queue is unreachable, so the recover sweep will queue it"
