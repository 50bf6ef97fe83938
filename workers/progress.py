"""Progress of a long task as Celery state, for Flower and a result backend.

A task reports ``done``/``total`` in two ways, since Flower and a result backend listen
in different places: ``update_state`` stores the custom ``PROGRESS`` state with its meta
in the result backend (a no-op without one), and a ``task-progress`` event reaches
Flower's event stream, where any event type it does not know becomes the task's state
(``PROGRESS``) with the event's fields. Reports are at most one a second, plus the first
and the last, and never fail the task: progress is a view, not part of the work.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

__all__ = ["PROGRESS", "PROGRESS_EVENT", "task_progress"]

log = logging.getLogger(__name__)

PROGRESS = "PROGRESS"
"""The custom state a task reports while it works."""

PROGRESS_EVENT = "task-progress"
"""The event type Flower turns into the ``PROGRESS`` state."""

MIN_INTERVAL_SECONDS = 1.0


def task_progress(task: Any, clock: Callable[[], float] = time.monotonic) -> Callable[[int, int], None]:
    """A ``progress(done, total)`` callback reporting for the bound Celery ``task`` now
    running. Called outside a worker (``task.run(...)`` in a test or a shell) it reports
    nothing: there is no task id to report for."""
    last = [float("-inf")]

    def report(done: int, total: int) -> None:
        if task.request.called_directly or task.request.id is None:
            return
        now = clock()
        if done < total and now - last[0] < MIN_INTERVAL_SECONDS:
            return
        last[0] = now
        try:
            task.update_state(state=PROGRESS, meta={"done": done, "total": total})
            task.send_event(PROGRESS_EVENT, retry=False, done=done, total=total)
        except Exception as exc:  # a monitor that cannot be reached never stops the work
            log.warning("could not report progress of task %s: %s", task.request.id, exc)

    return report
