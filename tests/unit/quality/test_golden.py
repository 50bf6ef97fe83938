"""The golden-set file: one sorted-key JSON object a line, a label changes one line,
freezing records the hash of the items, and a frozen file refuses labels and edits."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from retold.errors import GoldenSetError
from retold.quality.golden import (
    Filters,
    GoldenHeader,
    GoldenItem,
    GoldenSet,
    Snapshot,
    Who,
    freeze,
    label,
    read_golden,
    write_golden,
)
from retold.testing import T0


def _item(n: int, *, candidates: int = 2) -> GoldenItem:
    return GoldenItem(
        id=f"q{n:04d}", search_id=f"search-{n}", scope="user:aditya", stratum="user:aditya|semantic|answered",
        principal=Who("research-agent", "aditya", "atlas" if n % 2 else None),
        question=(f"question number {n}?",), filters=Filters(types=("semantic",), include_history=n == 3),
        candidates=tuple(Snapshot(f"rec-{n}-{c}", c + 1, "semantic", "confirmed", "user:aditya",
                                  f"fact {c} about Aditya", "Aditya said so" if c else None)
                         for c in range(candidates)),
    )


def _golden(count: int = 3) -> GoldenSet:
    header = GoldenHeader(tenant="default", created_at="2026-09-03T12:00:00.000000Z", source="a test log")
    return GoldenSet(header, tuple(_item(n) for n in range(1, count + 1)))


def _labelled(golden: GoldenSet) -> GoldenSet:
    for item in golden.items:
        golden = (label(golden, item.id, nothing_stored=True) if item.id == "q0002"
                  else label(golden, item.id, expected=[item.candidates[0].id], answer="fact 0"))
    return golden


def test_a_set_is_one_sorted_object_a_line_and_reads_back_the_same(tmp_path: Path) -> None:
    path = tmp_path / "set.jsonl"
    golden = _golden()
    write_golden(path, golden)
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 4
    parsed = [json.loads(line) for line in lines]
    assert parsed[0]["format"] == "retold-golden" and parsed[0]["frozen"] is None
    for data in parsed:
        assert list(data) == sorted(data)
    assert [d["id"] for d in parsed[1:]] == ["q0001", "q0002", "q0003"]
    assert read_golden(path) == golden


def test_labelling_one_item_changes_one_line(tmp_path: Path) -> None:
    path = tmp_path / "set.jsonl"
    golden = _golden()
    write_golden(path, golden)
    before = path.read_text(encoding="utf-8").splitlines()
    write_golden(path, label(golden, "q0002", expected=["rec-2-1"]))
    after = path.read_text(encoding="utf-8").splitlines()
    changed = [n for n, (a, b) in enumerate(zip(before, after, strict=True)) if a != b]
    assert changed == [2]
    item = read_golden(path).item("q0002")
    assert item.labelled and item.expected == ("rec-2-1",) and not item.nothing_stored


def test_a_label_names_candidates_or_nothing_stored_never_both(tmp_path: Path) -> None:
    golden = _golden()
    with pytest.raises(GoldenSetError, match="not among its candidates"):
        label(golden, "q0001", expected=["rec-9-9"])
    with pytest.raises(GoldenSetError, match="not both"):
        label(golden, "q0001", expected=["rec-1-0"], nothing_stored=True)
    with pytest.raises(GoldenSetError, match="not both"):
        label(golden, "q0001")
    with pytest.raises(GoldenSetError, match="no item q0099"):
        label(golden, "q0099", nothing_stored=True)
    # A record the search did not return is labelled with its snapshot beside the candidates.
    extra = Snapshot("rec-elsewhere", None, "semantic", "confirmed", "user:aditya", "the answer", None)
    item = label(golden, "q0001", expected=["rec-elsewhere"], added=[extra]).item("q0001")
    assert item.expected == ("rec-elsewhere",) and item.candidates[-1] == extra


def test_freezing_records_the_hash_and_then_refuses_labels(tmp_path: Path) -> None:
    path = tmp_path / "set.jsonl"
    golden = _labelled(_golden())
    frozen = freeze(golden, T0)
    assert frozen.header.frozen is not None
    assert frozen.header.frozen.sha256 == golden.content_hash() == frozen.content_hash()
    write_golden(path, frozen)
    again = read_golden(path)
    assert again == frozen
    with pytest.raises(GoldenSetError, match="frozen"):
        label(again, "q0001", nothing_stored=True)
    with pytest.raises(GoldenSetError, match="already frozen"):
        freeze(again, T0)


def test_a_frozen_file_changed_by_hand_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "set.jsonl"
    write_golden(path, freeze(_labelled(_golden()), T0))
    text = path.read_text(encoding="utf-8")
    path.write_text(text.replace('"expected": ["rec-1-0"]', '"expected": ["rec-1-1"]'), encoding="utf-8")
    with pytest.raises(GoldenSetError) as refused:
        read_golden(path)
    message = str(refused.value)
    assert "changed after freezing" in message and "\n" not in message


def test_freezing_needs_every_item_labelled_unless_told_to_drop_the_rest() -> None:
    golden = label(_golden(), "q0001", nothing_stored=True)
    with pytest.raises(GoldenSetError, match=r"2 items are not labelled \(q0002, q0003\)"):
        freeze(golden, T0)
    frozen = freeze(golden, T0, drop_unlabelled=True)
    assert [item.id for item in frozen.items] == ["q0001"]
    with pytest.raises(GoldenSetError, match="nothing to freeze"):
        freeze(_golden(), T0, drop_unlabelled=True)


@pytest.mark.parametrize(("edit", "needle"), [
    (lambda lines: lines[:1] + ["{not json"] + lines[2:], "line 2: not JSON"),
    (lambda lines: [lines[0].replace("retold-golden", "something-else"), *lines[1:]], "is not a golden set"),
    (lambda lines: [lines[0], lines[1].replace('"stratum"', '"strata"'), *lines[2:]],
     "line 2: the item lacks stratum and has unknown strata"),
    (lambda lines: [lines[0], lines[1].replace('"labelled": false', '"labelled": true'), *lines[2:]],
     "labelled without expected records"),
    (lambda lines: [*lines, lines[1]], "item id q0001 is used twice"),
    (lambda lines: [lines[0], lines[1].replace('"scope": "user:aditya"', '"scope": "aditya"'), *lines[2:]],
     "scope must look like kind:id"),
])
def test_a_malformed_file_is_refused_in_one_line_naming_where(tmp_path: Path, edit, needle) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "set.jsonl"
    write_golden(path, _golden())
    lines = path.read_text(encoding="utf-8").splitlines()
    path.write_text("\n".join(edit(lines)) + "\n", encoding="utf-8")
    with pytest.raises(GoldenSetError) as refused:
        read_golden(path)
    assert needle in str(refused.value) and "\n" not in str(refused.value)
