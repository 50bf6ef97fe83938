"""Records written by the real extraction run, for tests of what reads extraction's writes
(the extraction audit): sessions of user turns, one fact a turn, extracted with the fake
extractor and the accepting reviewer."""

from __future__ import annotations

from dataclasses import replace

from retold.ingest.extractor import FakeExtractor
from retold.ingest.reviewer import TableReviewer
from retold.models import CandidateRecord, ExtractionOutput, SessionSummary
from retold.testing import World

__all__ = ["extract_facts"]

_PER_SESSION = 10  # under ingestion.extraction_max_candidates


def extract_facts(world: World, session_id: str, count: int, *, first: int = 0) -> list[str]:
    """End sessions named ``<session_id>-<n>`` whose user turns each state one fact (a gym
    locker's code, numbered from ``first``), extract one record from each turn, and return
    the ids of the records extraction wrote, in turn order."""
    written: list[str] = []
    for part, start in enumerate(range(first, first + count, _PER_SESSION)):
        session = f"{session_id}-{part}"
        principal = replace(world.p, session_id=session)
        numbers = range(start, min(start + _PER_SESSION, first + count))
        facts = [f"My locker at the gym is number {n} and the code is {1000 + n} for it." for n in numbers]
        for fact in facts:
            world.rt.hooks.on_turn(principal, "user", fact)
        world.rt.hooks.on_turn(principal, "assistant", "Noted.")  # a session needs two turns
        world.rt.hooks.on_session_end(principal)
        candidates = [
            CandidateRecord(type="semantic", content=f"Aditya's gym locker {n} has code {1000 + n}.",
                            attribute=f"locker_{n}_code", source_kind="user_statement", evidence=fact,
                            evidence_turn=turn, entity_mentions=[], confidence=0.9)
            for turn, (n, fact) in enumerate(zip(numbers, facts, strict=True), 1)]
        output = ExtractionOutput(candidates, SessionSummary(f"Aditya listed {len(facts)} lockers.", [], []))
        result = world.rt.session_end.using(FakeExtractor(output), TableReviewer()).run(session)
        assert result.outcome == "extracted", result
        (run,) = [e for e in world.events("extraction.run") if e["payload"]["session_id"] == session]
        written += [str(o["record_id"]) for o in run["payload"]["outcomes"]]
    assert len(written) == count, f"extraction wrote {len(written)} of {count} records"
    return written
