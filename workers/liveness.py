"""A worker that lost an acknowledgement to a broker outage exits rather than idling.

Tasks are acknowledged late, after they ran. When the broker stops answering while a task
finishes, the acknowledgement times out and kombu logs it as a CRITICAL "Couldn't ack" on
the request logger. With broker heartbeats the consumer notices the dead connection and
reconnects; without them (``--without-heartbeat``) it keeps the connection it believes is
alive and never takes another task, while looking healthy to a process supervisor.

Nothing in that state can be repaired from inside the consumer, but a new process starts
clean, so the first lost acknowledgement asks the worker to stop with exit code 1 (a warm
stop: the task that lost its acknowledgement has finished) and its supervisor (compose's
restart policy, systemd) starts a fresh one. Nothing is lost: a message that was never
acknowledged is delivered again, and the session's claim makes the second run find the
work done.
"""

from __future__ import annotations

import logging
from typing import Any

from celery.signals import worker_init

__all__ = ["EXIT_ACK_LOST", "AckWatch", "watch_acknowledgements"]

log = logging.getLogger(__name__)

EXIT_ACK_LOST = 1
# Where Celery's request objects log a failed acknowledgement (kombu writes the message).
_REQUEST_LOGGER = "celery.worker.request"


class AckWatch(logging.Handler):
    """Turns the first "Couldn't ack" record into a request to stop the worker."""

    def __init__(self) -> None:
        super().__init__(level=logging.CRITICAL)
        self.fired = False

    def emit(self, record: logging.LogRecord) -> None:
        if self.fired or not str(record.msg).startswith("Couldn't ack"):
            return
        self.fired = True
        from celery.worker import state

        log.critical("the broker lost a task acknowledgement; this worker stops (exit %d) so its "
                     "supervisor starts a fresh one, and the unacknowledged task is delivered again",
                     EXIT_ACK_LOST)
        # should_stop, not should_terminate: Celery keeps the exit code only of a warm stop.
        state.should_stop = EXIT_ACK_LOST


def watch_acknowledgements() -> AckWatch:
    """Attach the watch to the request logger (once per process) and return it."""
    logger = logging.getLogger(_REQUEST_LOGGER)
    for handler in logger.handlers:
        if isinstance(handler, AckWatch):
            return handler
    watch = AckWatch()
    logger.addHandler(watch)
    return watch


def _on_worker_init(**_: Any) -> None:
    watch_acknowledgements()


worker_init.connect(_on_worker_init, weak=False)
