"""The capacity choice, as properties over any scope: it never picks a pinned record or
the last live value of an attribute, picks exactly as many as bring the scope to its cap
when it can, and picks the lowest scores."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from retold.policy.capacity import choose_archivals, score
from retold.store.capacity import CapacityRow

NOW = datetime(2026, 6, 1, tzinfo=UTC)
RANKS = {"user_statement": 4, "system": 3, "tool_result": 2, "session_summary": 2, "agent_inference": 1}


@st.composite
def _rows(draw: st.DrawFn) -> list[CapacityRow]:
    count = draw(st.integers(0, 40))
    out = []
    for seq in range(count):
        days = draw(st.integers(0, 900))
        used = draw(st.none() | st.integers(0, 400))
        out.append(CapacityRow(
            record_id=f"r{seq}", seq=seq, status=draw(st.sampled_from(["provisional", "confirmed"])),
            source_kind=draw(st.sampled_from(sorted(RANKS))), has_evidence=draw(st.booleans()),
            subject=draw(st.sampled_from(["aditya", "mei"])),
            attribute=draw(st.none() | st.sampled_from(["editor", "timezone", "coffee"])),
            created_at=NOW - timedelta(days=days),
            event_at=NOW - timedelta(days=days + draw(st.integers(0, 30))),
            last_used_at=None if used is None else NOW - timedelta(days=used), pinned=draw(st.booleans())))
    return out


@settings(max_examples=300, deadline=None)
@given(_rows(), st.integers(1, 30))
def test_the_choice_keeps_pins_and_every_attribute_and_takes_the_lowest(
    rows: list[CapacityRow], cap: int,
) -> None:
    chosen = choose_archivals(rows, cap, NOW, RANKS)
    picked = {a.row.record_id for a in chosen}
    left = [r for r in rows if r.record_id not in picked]
    assert not any(a.row.pinned for a in chosen)
    held = {(r.subject, r.attribute) for r in rows if r.attribute is not None}
    assert held == {(r.subject, r.attribute) for r in left if r.attribute is not None}
    newest: dict[tuple[str, str], CapacityRow] = {}
    for r in rows:
        if r.attribute is not None:
            key = (r.subject, r.attribute)
            if key not in newest or (r.event_at, r.seq) > (newest[key].event_at, newest[key].seq):
                newest[key] = r
    protected = {r.record_id for r in rows if r.pinned} | {r.record_id for r in newest.values()}
    assert not picked & protected
    over = max(0, len(rows) - cap)
    assert len(chosen) <= over
    if len(rows) - len(protected) >= over:  # enough unprotected records: the cap is met exactly
        assert len(chosen) == over
    floor = max((a.parts.total for a in chosen), default=-1.0)
    # Nothing unprotected is left behind with a lower score than something picked.
    assert all(score(r, NOW, RANKS).total >= floor for r in left if r.record_id not in protected)


def test_each_part_moves_the_score_the_way_its_name_says() -> None:
    base = CapacityRow("r", 1, "provisional", "agent_inference", False, "aditya", None,
                       NOW - timedelta(days=200), NOW - timedelta(days=200), None, False)
    plain = score(base, NOW, RANKS)
    assert (plain.trust, plain.explicit, plain.use) == (0.25, 0.0, 0.0)
    stated = score(CapacityRow(**{**base.__dict__, "source_kind": "user_statement", "has_evidence": True,
                                  "status": "confirmed"}), NOW, RANKS)
    assert (stated.trust, stated.explicit) == (1.0, 1.0)
    used = score(CapacityRow(**{**base.__dict__, "last_used_at": NOW - timedelta(days=30)}), NOW, RANKS)
    assert abs(used.use - 0.5) < 1e-9  # one half-life since its last use
    recent = score(CapacityRow(**{**base.__dict__, "created_at": NOW, "event_at": NOW}), NOW, RANKS)
    assert recent.fresh == 1.0 > plain.fresh
    assert plain.total < used.total and plain.total < recent.total and plain.total < stated.total
