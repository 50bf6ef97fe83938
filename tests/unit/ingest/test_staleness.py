"""Which changes made while a write decided send it back to decide again."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from retold.ingest.staleness import check_decision
from retold.models import Scope
from retold.store.write_window import RecordChange, WriteWindow
from retold.testing import ADITYA, make_record

CANDIDATE = make_record(subject_entity_id="ent_aditya", attribute="editor", content="Aditya uses neovim.")
VECTOR = np.array([1.0, 0.0], dtype=np.float32)


def _at(cosine: float) -> np.ndarray:
    return np.array([cosine, np.sqrt(1 - cosine**2)], dtype=np.float32)


CHANGE = RecordChange("r1", 7, ADITYA, "semantic", "ent_other", "city", "confirmed", "Lives in Pune.",
                      _at(0.1))


def _check(*changes: RecordChange, read: dict[str, int] | None = None, gone: bool = False):  # type: ignore[no-untyped-def]
    return check_decision(WriteWindow(list(changes), gone), CANDIDATE, VECTOR, read or {},
                          alias_cosine=0.75, dedup_cosine=0.85)


def test_unrelated_changes_leave_the_decision_standing() -> None:
    assert _check(CHANGE) == _check()
    assert not _check(CHANGE).stale and _check(CHANGE).suspects == []
    assert not _check(replace(CHANGE, scope=Scope("user", "vera"), vector=_at(1.0))).suspects
    assert not _check(replace(CHANGE, type="episodic", vector=_at(1.0))).suspects
    assert not _check(replace(CHANGE, status="superseded", subject_entity_id="ent_aditya",
                              attribute="editor")).stale


def test_a_record_the_decision_read_counts_only_when_it_changed_after_the_read() -> None:
    assert not _check(CHANGE, read={"r1": 7}).stale
    assert _check(CHANGE, read={"r1": 6}).stale


def test_the_same_attribute_or_a_gone_entity_means_deciding_again() -> None:
    assert _check(replace(CHANGE, subject_entity_id="ent_aditya", attribute="editor")).stale
    assert _check(gone=True).stale


def test_close_records_are_suspects_at_the_floor_of_the_rule_they_could_meet() -> None:
    same_subject = replace(CHANGE, subject_entity_id="ent_aditya", attribute="tool")
    assert _check(replace(same_subject, vector=_at(0.8))).suspects  # a possible attribute alias
    assert not _check(replace(same_subject, vector=_at(0.7))).suspects
    assert not _check(replace(CHANGE, vector=_at(0.8))).suspects  # another subject: duplicates only
    assert _check(replace(CHANGE, vector=_at(0.9))).suspects
    # Without a comparable vector a same-subject record might be an alias: decide again.
    assert _check(replace(same_subject, vector=None)).stale
    assert not _check(replace(CHANGE, vector=None)).stale
