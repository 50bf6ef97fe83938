"""The project's own golden set (benchmarks/data/golden_own.jsonl) can run: it is frozen
and whole, and every record a label names is in the store files it is run against."""

from __future__ import annotations

import json
from pathlib import Path

from retold.quality.golden import read_golden

DATA = Path(__file__).resolve().parents[3] / "benchmarks" / "data"


def test_the_project_set_is_frozen_and_its_labels_name_records_of_its_store() -> None:
    golden = read_golden(DATA / "golden_own.jsonl")  # refused if edited after freezing
    assert golden.header.frozen is not None
    assert golden.items and all(item.labelled for item in golden.items)
    held: dict[str, set[str]] = {}
    for path in (DATA / "golden_own").glob("*.jsonl"):
        lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
        held[lines[0]["scope"]] = {line["id"] for line in lines[1:] if line.get("line") == "record"}
    for item in golden.items:
        assert item.scope in held, item.id
        assert set(item.expected) <= set().union(*held.values()), item.id
    assert any(item.nothing_stored for item in golden.items)
    assert any(item.filters.as_of for item in golden.items)
