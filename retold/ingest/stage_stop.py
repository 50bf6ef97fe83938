"""How one extraction stage ends a run without writing anything.

A model call that fails, an answer or stored stage that does not fit its schema, and a
write refused because another worker took the claim over each raise :class:`StageStop`,
which the runner turns into the run's outcome and event. Kept apart from the runner so
the rule "a failure stops the run, closed" reads in one place.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, TypeVar

from retold.hosted import HostedError
from retold.ingest.extractor import ExtractionOutputError

__all__ = ["ExtractionOutcome", "StageStop", "call_model", "parse_stage", "stop_unless_held"]

ExtractionOutcome = Literal[
    "extracted", "already_extracted", "not_configured", "failed", "parked", "deferred", "busy",
    "missing", "not_ended",
]
"""What one extraction run came to."""

_T = TypeVar("_T")


class StageStop(Exception):
    """Ends a run without writing: ``not_configured``, ``failed`` or, when the claim was
    taken over, ``busy`` (kind + message)."""

    def __init__(self, outcome: ExtractionOutcome, stage: str, kind: str, message: str) -> None:
        super().__init__(f"{stage} {kind}: {message}")
        self.outcome, self.stage, self.kind, self.message = outcome, stage, kind, message


def stop_unless_held(stage: str, held: bool) -> None:
    """A write refused because the claim changed hands stops the run, applying nothing."""
    if not held:
        raise StageStop("busy", stage, "claim_lost", "another worker took the claim over")


def parse_stage(stage: str, convert: Callable[[], _T]) -> _T:
    """A model answer or persisted stage that does not fit the schema fails closed."""
    try:
        return convert()
    except (ExtractionOutputError, KeyError, TypeError, ValueError, AttributeError) as exc:
        raise StageStop("failed", stage, "malformed", f"{type(exc).__name__}: {exc}"[:300]) from exc


def call_model(stage: str, call: Callable[[], _T]) -> _T:
    """Run one model call outside any transaction; a failure becomes :class:`StageStop`."""
    try:
        return call()
    except HostedError as exc:
        outcome: ExtractionOutcome = "not_configured" if exc.kind == "not_configured" else "failed"
        raise StageStop(outcome, stage, exc.kind, str(exc)) from exc
    except Exception as exc:  # an unexpected model failure is still closed, by type only
        raise StageStop("failed", stage, "error", type(exc).__name__) from exc
