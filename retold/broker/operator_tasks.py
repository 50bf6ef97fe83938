"""Operator work handed to the workers: a maintenance task published on the maintenance
queue of the configured broker, for a command that should not run in the operator's
shell (a re-embed of a large store). The message carries the arguments only; the worker
reads everything else from the store.
"""

from __future__ import annotations

from retold.config import Config
from retold.errors import RetoldError

__all__ = ["BrokerError", "REEMBED_TASK", "enqueue_reembed"]

REEMBED_TASK = "retold.reembed"


class BrokerError(RetoldError):
    """The broker refused, dropped or did not answer a publish; nothing was queued."""


def enqueue_reembed(config: Config, model: str, version: str, dims: int | None = None) -> str:
    """Publish ``retold.reembed(model, version, dims)`` on ``queue.maintenance_queue`` and
    return the task id (what Flower lists it under). Gives up within the publisher's two
    seconds and raises :class:`BrokerError` when the broker cannot take it."""
    from kombu.utils.url import maybe_sanitize_url

    from retold.broker.celery_app import broker_url, celery_app

    app = celery_app(config, "publisher")
    try:
        result = app.send_task(REEMBED_TASK, args=[model, version], kwargs={"dims": dims},
                               queue=config.queue.maintenance_queue, retry=False)
    except Exception as exc:  # kombu's and redis-py's errors share no base class
        where = maybe_sanitize_url(broker_url(config))
        raise BrokerError(f"could not queue the re-embed on {where}: {exc}") from exc
    finally:
        app.close()
    return str(result.id)

