"""A worker checks its store before it takes a task.

The main worker process runs the quick integrity check once logging is set up and before
the pool or the consumer starts: :func:`retold.store.location.check_store_at` with
``quick=True`` (on PostgreSQL the agreement check, and amcheck's structural btree check
where the database has the extension). A store the database itself finds damaged stops
the worker with one error line and exit code 1: extracting into a damaged store would only
spread the damage, and a restarting service manager keeps reporting it. Disagreement
between records, lexical rows and vectors is logged as one warning and the worker starts,
since its own writes are whole and refusing would stop every session's extraction over a
search problem; so does a store whose lock another process holds past the wait. See
docs/decisions.md, "Integrity checks".
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from celery.signals import worker_init

from retold.cli_failure import one_line
from retold.config import Config
from retold.errors import RetoldError, StoreLockedError, StoreMissingError
from retold.store.location import check_store_at
from retold.store.postgres.url import redact
from workers.app import config_from_environment

__all__ = ["EXIT_DAMAGED", "check_store"]

log = logging.getLogger(__name__)

EXIT_DAMAGED = 1


def check_store(config: Config) -> None:
    """Log what the quick check found; raise SystemExit when the worker must not start."""
    wait = config.store.busy_timeout_seconds
    url = config.store.url
    path = redact(url) if url else config.store.path
    if not url and (path == ":memory:" or not Path(path).exists()):
        return  # nothing stored yet: the runtime creates it
    try:
        report = check_store_at(config.store.target, quick=True, busy_timeout=wait)
    except StoreMissingError:
        return  # an empty database: the runtime creates the schema
    except StoreLockedError as exc:  # a busy store is no reason to stay down
        log.warning("store %s: start-up check skipped: %s", path, one_line(exc))
        return
    except RetoldError as exc:
        log.error("refusing to start: store %s cannot be checked: %s", path, one_line(exc))
        raise SystemExit(EXIT_DAMAGED) from exc
    if report.damaged:
        remedy = "REINDEX a damaged index or restore a backup" if url else "restore it from a snapshot"
        log.error("refusing to start: store %s is damaged (%s); %s (`retold check --store %s` lists "
                  "the problems)", path, report.summary(), remedy, path)
        raise SystemExit(EXIT_DAMAGED)
    if not report.ok:
        log.warning("store %s: %s; searches may miss or misreport records until it is repaired "
                    "(`retold check --store %s` lists them)", path, report.summary(), path)
        return
    log.info("store %s passed its quick check (%d active records, %.0f ms)", path,
             report.active_records, sum(report.timings_ms.values()))


def _on_worker_init(**_: Any) -> None:
    check_store(config_from_environment())


worker_init.connect(_on_worker_init, weak=False)
