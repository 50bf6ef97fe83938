"""build_runtime: the one composition root (DESIGN.md decision 4).

The CLI, agent adapters, Celery workers and benchmarks each build one Runtime per
process from one typed Config. Nothing here loads a model: the embedder loads on first
use, and the vector index on its first refresh.
"""

from __future__ import annotations

from pathlib import Path

from retold.config import Config, load_config
from retold.index.embedder import Embedder, embedder_from_config
from retold.index.vector import RefreshOutcome, VectorIndex
from retold.store import Store
from retold.util import Clock, SystemClock

__all__ = ["Runtime", "build_runtime"]


class Runtime:
    """The wired parts of one Retold process. Build it with :func:`build_runtime`."""

    def __init__(self, config: Config, store: Store, embedder: Embedder, clock: Clock) -> None:
        self.config = config
        self.store = store
        self.embedder = embedder
        self.clock = clock
        self.index = VectorIndex(embedder.name, embedder.version, embedder.dims)
        self._closed = False

    def refresh_index(self) -> RefreshOutcome:
        """Bring this process's vector index up to the store's records_version (LLD 7)."""
        return self.index.refresh(self.store, self.config.embedding.incremental_reload_max)

    def close(self) -> None:
        """Close the store; safe to call twice."""
        if not self._closed:
            self._closed = True
            self.store.close()

    def __enter__(self) -> Runtime:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def build_runtime(
    config: Config | None = None,
    *,
    clock: Clock | None = None,
    embedder: Embedder | None = None,
    allow_migration_issues: bool = False,
) -> Runtime:
    """Open (and migrate) the configured store and wire the model-backed parts.

    ``embedder`` replaces the configured one (tests pass a FakeEmbedder with pinned
    vectors); ``clock`` replaces the wall clock.
    """
    config = config or load_config()
    clock = clock or SystemClock()
    path = Path(config.store.path)
    if str(path) != ":memory:":
        path.parent.mkdir(parents=True, exist_ok=True)
    store = Store(
        path,
        busy_timeout_seconds=config.store.busy_timeout_seconds,
        clock=clock,
        allow_migration_issues=allow_migration_issues,
    )
    try:
        chosen = embedder or embedder_from_config(config.embedding)
    except BaseException:
        store.close()
        raise
    return Runtime(config, store, chosen, clock)
