"""A write whose encoder fails is kept, not refused: the memory is found by its words at
once, counted as waiting by ``retold check`` and ``retold metrics``, and the backfill
gives it its vector, which every agent's index then loads."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

from retold.cli import main
from retold.runtime import build_runtime
from retold.testing import World
from tests.mixed_store import config_text
from tests.unit.tools.test_handlers import tools, user_fact

CYCLES = "Aditya cycles to work on Tuesdays."


def _down(texts: list[str]) -> np.ndarray:
    raise RuntimeError("the encoder is down")


@pytest.fixture
def pending(world: World, monkeypatch: pytest.MonkeyPatch) -> str:
    """One memory written while the encoder was down; the encoder is back afterwards."""
    with monkeypatch.context() as patch:
        patch.setattr(world.embedder, "embed_documents", _down)
        written = user_fact(world, CYCLES, attribute="commute")
    assert "stored without its vector (encoder failed: RuntimeError)" in written["note"]
    return str(written["record_id"])


def test_the_memory_is_kept_and_found_by_its_words_at_once(world: World, pending: str) -> None:
    hits = tools(world).call("memory_search", world.p, {"queries": ["cycles to work on Tuesdays"]})["results"]
    assert [h["id"] for h in hits] == [pending]
    assert world.rt.store.pending_count() == 1
    assert world.rt.index.vector_for(pending) is None
    created = [e for e in world.events("record.created") if e["record_id"] == pending][0]
    assert created["payload"]["embedding_pending"] == "encoder failed: RuntimeError"


def test_the_backfill_embeds_it_and_another_agent_loads_the_vector(world: World, pending: str) -> None:
    other = build_runtime(world.rt.config, embedder=world.embedder, clock=world.clock, environ={})
    try:
        other.tools.call("memory_search", world.p, {"queries": ["anything"]})  # its index is loaded
        result = world.rt.operations.backfill()
        assert (result.embedded, result.pending, result.error) == (1, 0, None)
        expected = world.embedder.embed_documents([CYCLES])[0]
        assert np.allclose(world.rt.index.vector_for(pending), expected)
        other.tools.call("memory_search", world.p, {"queries": ["anything"]})  # refreshes by delta
        assert np.allclose(other.index.vector_for(pending), expected)
    finally:
        other.close()
    assert world.rt.operations.backfill().embedded == 0  # nothing left


def test_a_backfill_while_the_encoder_is_still_down_changes_nothing(
    world: World, pending: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(world.embedder, "embed_documents", _down)
    result = world.rt.operations.backfill()
    assert (result.embedded, result.pending) == (0, 1) and "the encoder is down" in (result.error or "")


def test_check_and_metrics_count_it_and_call_it_no_fault(
    world: World, pending: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    world.clock.set(datetime.now(UTC))
    world.rt.close()
    config = tmp_path / "cli.yaml"
    config.write_text(config_text())
    base = ["--store", world.target, "--config", str(config)]
    assert main(["check", *base]) == 0
    assert "1 waiting for their vector" in capsys.readouterr().out
    assert main(["metrics", "--no-queue", "--no-hygiene", *base]) == 0
    assert "1 records waiting for the backfill" in capsys.readouterr().out


def test_retold_backfill_embeds_what_waits_and_says_what_is_left(
    world: World, pending: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    world.rt.close()
    config = tmp_path / "cli.yaml"
    config.write_text(config_text())
    base = ["--store", world.target, "--config", str(config)]
    assert main(["backfill", *base]) == 0
    assert capsys.readouterr().out.strip() == "embedded 1 records; 0 still wait for their vector"
    assert main(["check", *base]) == 0
    assert "waiting for their vector" not in capsys.readouterr().out


def test_retold_backfill_with_the_encoder_still_down_is_one_line_and_keeps_them_waiting(
    world: World, pending: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    world.rt.close()
    config = tmp_path / "cli.yaml"
    config.write_text(config_text())
    monkeypatch.setattr(type(world.embedder), "embed_documents", lambda self, texts: _down(texts))
    assert main(["backfill", "--store", world.target, "--config", str(config)]) == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "the encoder failed after 0 records" in line and "1 still wait for their vector" in line


def test_a_correction_while_the_encoder_is_down_is_kept_and_backfilled(
    world: World, monkeypatch: pytest.MonkeyPatch,
) -> None:
    written = user_fact(world, CYCLES, attribute="commute")
    said = "I cycle to work on Thursdays now."
    world.say("user", said)
    with monkeypatch.context() as patch:
        patch.setattr(world.embedder, "embed_documents", _down)
        revised = tools(world).call("memory_revise", world.p, {
            "id": written["record_id"], "action": "supersede", "reason": "changed days",
            "content": "Aditya cycles to work on Thursdays.", "source_kind": "user_statement",
            "evidence": said})
    assert "error" not in revised, revised
    assert "stored without its vector (encoder failed: RuntimeError)" in revised["note"]
    (successor,) = world.rt.store.find_records(supersedes_id=str(written["record_id"]))
    assert successor.content == "Aditya cycles to work on Thursdays." and successor.status != "superseded"
    assert world.rt.store.pending_count() == 1 and world.rt.index.vector_for(successor.id) is None
    found = tools(world).call("memory_search", world.p, {"queries": ["cycles to work on Thursdays"]})
    assert [h["id"] for h in found["results"]] == [successor.id]  # found by its words meanwhile
    assert world.rt.operations.backfill().embedded == 1
    assert world.rt.index.vector_for(successor.id) is not None
