"""A write decision and the store's write lock: decide before taking it where the store
allows, then check the decision against what other writers changed meanwhile.

On PostgreSQL a write's transaction takes the write lock only once its decision is made,
so writers of unrelated facts decide in parallel. With the lock held the writer reads its
window (:class:`~retold.store.write_window.WriteWindow`) and asks
:func:`~retold.ingest.staleness.check_decision` whether the decision still stands; records
written meanwhile that are close to the candidate are judged, and if one of them, or any
other change, bears on the decision, it is made once more, under the lock. On SQLite the
lock is held from the start and the window is always empty. See docs/decisions.md,
"Writers decide before they take the write lock".
"""

from __future__ import annotations

from collections.abc import Callable

from retold.clock import Timer
from retold.config import IngestionConfig
from retold.index.embedder import Embedder
from retold.ingest.decider import Decided, Decider
from retold.ingest.staleness import DECISIVE_VERDICTS, check_decision
from retold.store import Store
from retold.store.write_window import WriteWindow

__all__ = ["WriteLock"]


class WriteLock:
    """Takes the write lock around a decision inside a late-locked transaction
    (``Store.atomic(late_lock=True)``) and makes the decision again if it went stale."""

    def __init__(self, store: Store, embedder: Embedder, config: IngestionConfig, decider: Decider) -> None:
        self.store, self.embedder, self.config, self.decider = store, embedder, config, decider

    def decide(self, attempt: Callable[[], Decided], timer: Timer) -> Decided:
        """The decision ``attempt`` makes, holding the write lock when it returns: made
        before the lock and kept if it stands, else made again under the lock (its audit
        then says ``decided_again``). ``attempt`` must build everything it decides on anew
        (entities included), as it may run twice."""
        decided = attempt()
        stands = self._stands(self._lock(decided, timer), decided)
        if stands is not None:
            return stands
        decided = attempt()
        self._lock(decided, timer)  # held already: the window of a held lock is empty
        return decided.with_audit(decided_again=True)

    def _lock(self, decided: Decided, timer: Timer) -> WriteWindow:
        window = self.store.lock_for_write(decided.candidate.entity_ids, model=self.embedder.name,
                                           version=self.embedder.version)
        timer.mark("write_lock")
        return window

    def _stands(self, window: WriteWindow, decided: Decided) -> Decided | None:
        """The decision, with the verdicts on records written meanwhile added, if it
        survives what ``window`` shows; None if it must be made again under the lock."""
        candidate = decided.candidate.record
        check = check_decision(window, candidate, decided.vector, decided.read,
                               alias_cosine=self.config.attribute_alias_cosine,
                               dedup_cosine=self.config.dedup_candidate_cosine)
        if check.stale:
            return None
        verdicts = self.decider.judge_records(candidate, [(c.record_id, c.content) for c in check.suspects])
        if any(verdict in DECISIVE_VERDICTS for verdict in verdicts.values()):
            return None
        return decided.with_audit(verdicts={**decided.audit["verdicts"], **verdicts})
