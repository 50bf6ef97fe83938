"""The tenants one process serves: a runtime per tenant, built on first use, within a
memory budget for the vectors they hold.

A worker (or a host that serves several customers) holds one :class:`~retold.runtime.Runtime`
per tenant it has served, each with its own store connection and vector index; the home
tenant's runtime carries the model, and the others share it. Without a bound, a process
that has served every tenant of a thousand-tenant store would hold every tenant's vectors,
which is exactly what tenants exist to avoid. So the runtimes are kept in
least-recently-used order, and once their indexes together hold more than ``index.max_ram_mb``
the least recently used idle runtimes are closed until the rest fit. A closed tenant costs
nothing until it is served again, when its runtime is rebuilt and its index reloads from
the store, as on a cold start.

A runtime is in use from :meth:`TenantRuntimes.lease` until the block ends, and only a
runtime nobody holds is closed: a thread searching one tenant never has its index taken
away by another thread opening a second. The home runtime is never closed (its model
serves every tenant).
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from retold.runtime import Runtime

__all__ = ["TenantRuntimes"]

log = logging.getLogger(__name__)

# Builds the runtime of one tenant; None is the configured (home) tenant. The second
# argument is the home runtime, whose model the new one shares (None when building it).
OpenRuntime = Callable[[str | None, Runtime | None], Runtime]


class TenantRuntimes:
    """One runtime per served tenant, the least recently used closed past a memory budget."""

    def __init__(self, open_runtime: OpenRuntime, max_ram_mb: float | None) -> None:
        self._open = open_runtime
        self._max_bytes = None if max_ram_mb is None else int(max_ram_mb * 1024 * 1024)
        self._lock = threading.Lock()
        self._home: Runtime | None = None
        # tenant -> runtime, least recently used first; never holds the home runtime
        self._others: OrderedDict[str, Runtime] = OrderedDict()
        self._in_use: dict[str, int] = {}
        self.evicted = 0  # runtimes closed to stay within the budget, for metrics and tests

    def home(self) -> Runtime:
        """The configured tenant's runtime, built on first use."""
        with self._lock:
            return self._home_locked()

    def _home_locked(self) -> Runtime:
        if self._home is None:
            self._home = self._open(None, None)
        return self._home

    def get(self, tenant: str | None = None) -> Runtime:
        """The runtime of ``tenant`` (None: the home tenant), built on first use, without
        holding it: for callers that run one task at a time in this process. Threads that
        share the process use :meth:`lease`."""
        with self._lock:
            runtime = self._acquire(tenant)
            self._evict_locked(keep=runtime)
            return runtime

    @contextmanager
    def lease(self, tenant: str | None = None) -> Iterator[Runtime]:
        """The runtime of ``tenant``, held until the block ends: it cannot be closed to make
        room meanwhile. The budget is enforced when the block ends."""
        with self._lock:
            runtime = self._acquire(tenant)
            name = runtime.tenant
            self._in_use[name] = self._in_use.get(name, 0) + 1
        try:
            yield runtime
        finally:
            with self._lock:
                left = self._in_use[name] - 1
                if left:
                    self._in_use[name] = left
                else:
                    del self._in_use[name]
                self._evict_locked(keep=None)

    def forget(self, tenant: str) -> None:
        """Close and drop the runtime of ``tenant`` (its store is gone), if held."""
        with self._lock:
            runtime = self._others.pop(tenant, None)
        if runtime is not None:
            runtime.close()

    def held(self) -> list[str]:
        """The tenants whose runtimes this process holds, home first, then least recently
        used first."""
        with self._lock:
            home = [] if self._home is None else [self._home.tenant]
            return home + list(self._others)

    def held_bytes(self) -> int:
        """Bytes of vectors the held runtimes' indexes keep in memory."""
        with self._lock:
            return self._bytes_locked()

    def close(self) -> None:
        """Close every runtime; safe to call twice."""
        with self._lock:
            runtimes = list(self._others.values()) + ([] if self._home is None else [self._home])
            self._others.clear()
            self._home = None
            self._in_use.clear()
        for runtime in runtimes:
            runtime.close()

    def _acquire(self, tenant: str | None) -> Runtime:
        home = self._home_locked()
        if tenant is None or tenant == home.tenant:
            return home
        runtime = self._others.get(tenant)
        if runtime is None:
            runtime = self._others[tenant] = self._open(tenant, home)
        self._others.move_to_end(tenant)
        return runtime

    def _bytes_locked(self) -> int:
        runtimes = list(self._others.values()) + ([] if self._home is None else [self._home])
        return sum(runtime.index.nbytes for runtime in runtimes)

    def _evict_locked(self, keep: Runtime | None) -> None:
        """Close the least recently used idle runtimes while the indexes hold more than the
        budget. A runtime in use, ``keep`` and the home runtime stay, so the budget can be
        exceeded by what is being served right now, never by what merely was."""
        if self._max_bytes is None:
            return
        held = self._bytes_locked()
        for tenant in list(self._others):
            if held <= self._max_bytes:
                return
            runtime = self._others[tenant]
            if runtime is keep or tenant in self._in_use:
                continue
            held -= runtime.index.nbytes
            del self._others[tenant]
            self.evicted += 1
            log.info("closing tenant %s's runtime: the served tenants' vectors exceed index.max_ram_mb",
                     tenant)
            runtime.close()
