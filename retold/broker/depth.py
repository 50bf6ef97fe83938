"""How many messages wait in the extraction and maintenance queues, asked of the broker
agents and workers share, with a hard deadline.

A metrics reader must never hang on a broker that is down, slow or stopped mid-answer, so
the question runs on a daemon thread and is abandoned when the deadline passes; the
answer then says the broker could not be reached and why.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path

from retold.config import Config

__all__ = ["DEPTH_TIMEOUT_SECONDS", "QueueDepths", "queue_depths"]

DEPTH_TIMEOUT_SECONDS = 2.0
_EMBEDDED = "sqla+sqlite:///"


@dataclass(frozen=True)
class QueueDepths:
    """Messages waiting per queue (``depths``, empty when unreachable) on ``broker`` (its
    URL without a password)."""

    broker: str
    reachable: bool
    depths: dict[str, int] = field(default_factory=dict)
    error: str | None = None


def queue_depths(config: Config, *, timeout_seconds: float = DEPTH_TIMEOUT_SECONDS) -> QueueDepths:
    """Ask ``config``'s broker for the length of its two queues, giving up after
    ``timeout_seconds``. The embedded broker's file is never created by asking: without
    it nothing was ever queued."""
    from kombu.utils.url import maybe_sanitize_url

    from retold.broker.celery_app import broker_url

    url = broker_url(config)
    shown = str(maybe_sanitize_url(url))
    queues = (config.queue.extraction_queue, config.queue.maintenance_queue)
    if url.startswith(_EMBEDDED) and not Path(url.removeprefix(_EMBEDDED)).exists():
        return QueueDepths(shown, True, dict.fromkeys(queues, 0))
    answer: list[dict[str, int] | BaseException] = []
    probe = threading.Thread(target=_probe, args=(config, queues, answer), daemon=True,
                             name="retold-queue-depth")
    probe.start()
    probe.join(timeout_seconds)
    if not answer:
        return QueueDepths(shown, False, error=f"no answer within {timeout_seconds:g} s")
    result = answer[0]
    if isinstance(result, BaseException):
        return QueueDepths(shown, False, error=_one_line(result))
    return QueueDepths(shown, True, result)


def _probe(config: Config, queues: tuple[str, ...], answer: list[dict[str, int] | BaseException]) -> None:
    from kombu.exceptions import ChannelError

    from retold.broker.celery_app import celery_app

    app = celery_app(config, "publisher")  # short socket timeouts, no connection retries
    try:
        with app.connection_for_read() as connection:
            channel = connection.default_channel
            depths: dict[str, int] = {}
            for name in queues:
                try:
                    depths[name] = int(channel.queue_declare(queue=name, passive=True).message_count)
                except ChannelError:  # no message was ever sent to it
                    depths[name] = 0
        answer.append(depths)
    except Exception as exc:  # reported as the broker's state, never raised
        answer.append(exc)
    finally:
        app.close()


def _one_line(exc: BaseException) -> str:
    return " ".join(f"{type(exc).__name__}: {exc}".split())
