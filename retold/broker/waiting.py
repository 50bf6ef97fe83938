"""Which sessions' extraction messages still wait in the broker's queue.

Tasks are acknowledged late. A worker that takes a message and dies before it acknowledges
it (killed, out of memory) leaves the message in Redis's unacknowledged set, where kombu
restores it only after the visibility timeout (two hours), while the store still marks the
session as queued; the recover sweep would leave it alone just as long. A live worker
claims a session as soon as it starts its task, so a session that is marked queued, is not
claimed, and has no message waiting in the queue is held by nobody: the sweep hands it over
again (:meth:`retold.ingest.attempts.Attempts.enqueue_due`). A second delivery of the same
session is harmless, because the run claims it.

This reads the waiting messages of Redis's lists; for any other broker, or a Redis that
does not answer in time, it says nothing and the sweep decides as before.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable

from retold.broker.celery_app import EXTRACTION_TASKS
from retold.tenant import DEFAULT_TENANT

__all__ = ["waiting_sessions"]

_REDIS = ("redis://", "rediss://")


def waiting_sessions(url: str, queues: Iterable[str], timeout_seconds: float = 2.0, *,
                     tenant: str = DEFAULT_TENANT) -> frozenset[str] | None:
    """The session ids of ``tenant``'s extraction and review messages waiting in ``queues``
    of the Redis ``url`` names, or None for another broker or one that does not answer.
    Tenants may use the same session ids, so a message counts only for its own tenant."""
    if not url.startswith(_REDIS):
        return None
    import redis

    client = redis.Redis.from_url(url, socket_timeout=timeout_seconds,
                                  socket_connect_timeout=timeout_seconds)
    try:
        found = {_session_of(raw, tenant) for queue in queues for raw in client.lrange(queue, 0, -1)}
    except (redis.RedisError, OSError):
        return None
    finally:
        client.close()
    return frozenset(sid for sid in found if sid is not None)


def _session_of(raw: bytes | str, tenant: str) -> str | None:
    """The session id an extraction or review message of ``tenant`` carries (its first
    argument; a message without a tenant keyword is the default tenant's)."""
    try:
        message = json.loads(raw)
        if message.get("headers", {}).get("task") not in EXTRACTION_TASKS:
            return None
        body = message["body"]
        if message.get("properties", {}).get("body_encoding") == "base64":
            body = base64.b64decode(body)
        args, kwargs = json.loads(body)[:2]
        if str(kwargs.get("tenant", DEFAULT_TENANT)) != tenant:
            return None
        return str(args[0]) if args else None
    except (ValueError, KeyError, IndexError, TypeError):
        return None
