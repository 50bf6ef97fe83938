"""Which running instance of the broker the workers reach.

A Redis that keeps nothing on disk (the shipped compose file runs it so) forgets every
queued message when it restarts, while the store still marks those sessions as handed
over. Redis gives each start a new run id, so the recover sweep compares it with the one
it saw last and hands the marked sessions over again when it changed
(``Store.broker_seen``). The embedded broker keeps its messages in a file and has no
such instance; nor, here, does any other transport.
"""

from __future__ import annotations

__all__ = ["broker_instance"]

_REDIS = ("redis://", "rediss://")


def broker_instance(url: str, timeout_seconds: float = 2.0) -> str | None:
    """The run id of the Redis ``url`` names, or None for another broker or one that does
    not answer within ``timeout_seconds`` (the sweep then decides as before)."""
    if not url.startswith(_REDIS):
        return None
    import redis

    client = redis.Redis.from_url(url, socket_timeout=timeout_seconds,
                                  socket_connect_timeout=timeout_seconds)
    try:
        return str(client.info("server")["run_id"])
    except (redis.RedisError, OSError, KeyError):
        return None
    finally:
        client.close()
