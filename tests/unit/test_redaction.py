"""A tenant whose memory pack redacts a class: the raw text of a record in it reaches no
embedder, word index, search log, hosted prompt or metric, and its reader still gets it.

One canary, a made-up identifier matching the pack's ``pii`` pattern, is planted in a
record or said in a session; every sink is then searched for it (the request bodies a
provider SDK sends included). Runs on SQLite and PostgreSQL.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from retold import build_runtime
from retold.config.pack import load_pack_file
from retold.errors import ConfigError
from retold.hosted import (
    CompletionClient,
    CompletionRequest,
    FakeCompletionClient,
)
from retold.ingest import extractor as extraction_schema
from retold.ingest.extractor import ReplayExtractor, StructuredLLMExtractor
from retold.ingest.reviewer import StructuredLLMReviewer, TableReviewer
from retold.ingest.session import InProcessScheduler
from retold.models import (
    CandidateRecord,
    EntityMention,
    ExtractionOutput,
    Principal,
    RewriteResult,
    SearchRequest,
    SessionSummary,
)
from retold.observability import collect_metrics, families
from retold.plain import to_plain
from retold.policy.sensitivity import SensitivityRules
from retold.testing import AGENT, Gap, ScriptedJudge, ScriptedPlanner, World, make_world
from retold.testing.anthropic_stub import AnthropicStub
from retold.testing.openai_stub import OpenAIStub
from tests.providers import stub_answer
from tests.sql import dump_lines, rows

CANARY = "123-45-6789"  # a made-up identifier in the shape the pack's pii pattern masks
PACK = r"""
default:
  governance:
    sensitivity_classes:
      - none
      - {name: pii, decided_by: pattern, pattern: '\b\d{3}-\d{2}-\d{4}\b'}
      - {name: health, decided_by: category}
    redact_before_embedding: [pii]
"""
# A standing instruction that carries an identifier: a communication fact about the user,
# so it enters the profile when its quote is found in the turn it names; QUOTE and WANTS
# are what a model shown the masked turn can write.
SAID = f"Please always answer me in British English and sign off with my badge number {CANARY}."
QUOTE = "always answer me in British English and sign off with my badge number [pii]"
WANTS = "Aditya wants answers in British English, signed with badge [pii]."


def _world(tmp_path: Path, store_target: str, pack: str | None) -> World:
    path = None
    if pack is not None:
        path = tmp_path / "packs.yaml"
        path.write_text(pack, encoding="utf-8")
    return make_world(tmp_path, store=store_target, pack=None if path is None else str(path))


@pytest.fixture
def redacting(tmp_path: Path, store_target: str) -> Iterator[World]:
    made = _world(tmp_path, store_target, PACK)
    yield made
    made.rt.close()


@pytest.fixture
def plain(tmp_path: Path, store_target: str) -> Iterator[World]:
    made = _world(tmp_path, store_target, None)
    yield made
    made.rt.close()


def _recording(world: World) -> list[str]:
    """Every document text the world's embedder is asked to embed from now on."""
    seen: list[str] = []
    embed = world.embedder.embed_documents

    def recording(texts: list[str]) -> Any:
        seen.extend(texts)
        return embed(texts)

    world.embedder.embed_documents = recording  # type: ignore[method-assign]
    return seen


def _accept_all(request: CompletionRequest) -> dict[str, Any]:
    count = int(request.messages[0].content.split(" ", 1)[0])
    return {"decisions": [{"index": i, "action": "accept", "reason": "fine", "revision": None}
                          for i in range(count)]}


def _prompt_text(request: CompletionRequest) -> str:
    return request.system + "\n".join(m.content for m in request.messages)


def _plant(world: World) -> str:
    result = world.write(content=f"Aditya's social security number is {CANARY}.", attribute="ssn")
    assert result.error is None, result.error
    assert result.record_id is not None
    return result.record_id


def test_a_redacted_identifier_reaches_no_sink_and_its_reader_still_gets_it(redacting: World) -> None:
    w = redacting
    embedded = _recording(w)
    record_id = _plant(w)

    record = w.record(record_id)
    assert record.content == f"Aditya's social security number is {CANARY}."
    masked = "Aditya's social security number is [pii]."
    assert (record.sensitivity, record.redacted_content) == ("pii", masked)
    # The embedder saw the masked text only.
    assert embedded and all(CANARY not in text for text in embedded)
    assert any("[pii]" in text for text in embedded)
    # The word index holds the masked text: the identifier is not even findable by its digits.
    assert rows(w.rt.store, "SELECT count(*) FROM records_fts WHERE record_id = ?", record_id) == [(1,)]
    fts = rows(w.rt.store, "SELECT content FROM records_fts WHERE record_id = ?", record_id)
    assert fts == [(masked,)]

    # The reader asks for it, and gets the raw text, from search and from memory_get.
    found = w.rt.tools.search(w.p, SearchRequest(queries=["Aditya social security number"]))
    assert [hit["content"] for hit in found["results"] if hit["id"] == record_id] == [record.content]
    got = w.rt.tools.call("memory_get", w.p, {"ids": [record_id]})
    assert [r["content"] for r in got["records"]] == [record.content]
    assert w.rt.flush_search_log(10)
    logged = rows(w.rt.store, "SELECT * FROM search_log")
    assert logged and CANARY not in json.dumps(logged, default=str)

    # A later session about Aditya: the hosted extractor and reviewer prompts hold no canary,
    # though the reviewer is shown the live records about Aditya, this one among them.
    w.say("user", "Please keep every answer short and technical, I read them on my phone.")
    w.say("assistant", "Understood.")
    w.rt.hooks.on_session_end(w.p)
    assert w.p.session_id is not None
    output = ExtractionOutput([CandidateRecord(
        type="semantic", content="Aditya prefers short technical answers.", attribute="answer_style",
        source_kind="user_statement", evidence="keep every answer short and technical", evidence_turn=1,
        entity_mentions=[EntityMention("person", "Aditya", "about")])],
        SessionSummary("Aditya asked for short answers.", [], []))
    extract_client = FakeCompletionClient([extraction_schema.output_to_json(output)])
    review_client = FakeCompletionClient([_accept_all])
    runner = w.rt.session_end.using(StructuredLLMExtractor(extract_client, w.rt.config.ingestion),
                                   StructuredLLMReviewer(review_client, w.rt.config.ingestion))
    assert runner.run(w.p.session_id).outcome == "extracted"
    (review,) = review_client.calls
    assert "social security number is [pii]" in _prompt_text(review)  # shown, masked
    for request in [*extract_client.calls, review]:
        assert CANARY not in _prompt_text(request)

    # Metrics count what happened; none carries the text.
    metrics = collect_metrics(w.rt.store, w.clock.now(), timedelta(minutes=5))
    assert CANARY not in json.dumps(to_plain(metrics)) + repr(list(families({"default": metrics})))
    assert all(CANARY not in text for text in embedded)


def test_a_pack_without_redaction_changes_nothing(plain: World) -> None:
    embedded = _recording(plain)
    record_id = _plant(plain)
    record = plain.record(record_id)
    assert (record.sensitivity, record.redacted_content) == ("none", None)
    assert any(CANARY in text for text in embedded)
    fts = rows(plain.rt.store, "SELECT content FROM records_fts WHERE record_id = ?", record_id)
    assert fts == [(record.content,)]


def test_a_record_takes_the_first_class_that_claims_it(redacting: World) -> None:
    diet = redacting.write(content="Aditya is diabetic and avoids sugar.", attribute="diet")
    assert redacting.record(diet.record_id).sensitivity == "health"
    assert redacting.record(diet.record_id).redacted_content is None
    other = redacting.write(content="Aditya prefers dark mode in his editor.", attribute="editor_theme")
    assert redacting.record(other.record_id).sensitivity == "none"


def test_masking_ignores_which_class_claimed_the_record(tmp_path: Path) -> None:
    # The category class is listed before pii and claims the record, yet the pii pattern
    # is masked all the same: masking follows the text, not the record's class.
    path = tmp_path / "packs.yaml"
    path.write_text(PACK.replace("      - {name: health, decided_by: category}\n", "").replace(
        "      - none\n", "      - none\n      - {name: health, decided_by: category}\n"), encoding="utf-8")
    governance = load_pack_file(path).default.pack.governance
    assert [c.name for c in governance.sensitivity_classes] == ["none", "health", "pii"]
    rules = SensitivityRules(governance, lambda _attribute, _content: "health")
    found = rules.classify(f"His insurance number is {CANARY}, from the hospital.")
    assert found.name == "health"
    assert found.redacted_content == "His insurance number is [pii], from the hospital."


def test_only_a_pattern_class_can_be_redacted(tmp_path: Path) -> None:
    path = tmp_path / "packs.yaml"
    path.write_text(PACK.replace("redact_before_embedding: [pii]", "redact_before_embedding: [health]"),
                    encoding="utf-8")
    with pytest.raises(ConfigError, match="redact_before_embedding: 'health' is not decided by a pattern"):
        load_pack_file(path)


def test_the_utility_planner_and_admission_judge_read_records_masked(redacting: World) -> None:
    w = redacting
    w.write(content=f"Aditya edits code in vim; his badge number is {CANARY}.", attribute="editor")
    planner = ScriptedPlanner({"editor": [Gap("which editor the user uses", "editor vim code")]})
    judge = ScriptedJudge({"vim": "fills"})
    config = w.rt.config.replace({"retrieval": {"trigger": {"mode": "hybrid"}}, "utility": {"enabled": True}})
    with build_runtime(config, clock=w.clock, embedder=w.embedder, judge=w.judge,
                       scheduler=InProcessScheduler(), environ={}, planner=planner, admission=judge) as rt:
        s = rt.session(AGENT, "aditya", session_id="chat")
        s.say("user", f"How do I reformat this file in my editor? My badge is {CANARY}.")
        s.respond(lambda recalled: f"Most editors reformat with a menu command, badge {CANARY}.")
        assert s.last_decision.admitted  # the judge was shown the record, and admitted it
    (shown,) = [c.content for c in judge.calls[0].candidates]
    assert shown == "Aditya edits code in vim; his badge number is [pii]."
    assert all(CANARY not in asked.profile for asked in planner.calls)
    # The user's turn and the draft reach the hosted stages masked too.
    assert planner.calls and all(CANARY not in asked.turn + asked.context for asked in planner.calls)
    assert "My badge is [pii]." in planner.calls[0].turn
    assert all(CANARY not in judged.turn + judged.draft for judged in judge.calls)


class RecordingRewriter:
    """A rewriter that hands the queries back and keeps what it was shown."""

    def __init__(self) -> None:
        self.shown: list[tuple[list[str], str | None]] = []

    def rewrite(self, queries: list[str], context: str | None) -> RewriteResult:
        self.shown.append((list(queries), context))
        return RewriteResult(list(queries), "unchanged")


def test_a_question_is_searched_rewritten_and_logged_masked(redacting: World) -> None:
    w = redacting
    rewriter = RecordingRewriter()
    config = w.rt.config.replace({"retrieval": {"rewrite": {"enabled": True}}})
    with build_runtime(config, clock=w.clock, embedder=w.embedder, judge=w.judge,
                       scheduler=InProcessScheduler(), environ={}, rewriter=rewriter) as rt:
        found = rt.tools.call("memory_search", w.p, {"queries": [f"whose badge number is {CANARY}?"]},
                              context=f"The user pasted {CANARY} a moment ago.")
        assert "error" not in found, found
    ((queries, context),) = rewriter.shown
    assert queries == ["whose badge number is [pii]?"] and context == "The user pasted [pii] a moment ago."
    # The search itself, and its log row, hold the placeholder too.
    assert found["rewritten_queries"] is None or CANARY not in json.dumps(found["rewritten_queries"])
    logged = rows(w.rt.store, "SELECT request, context FROM search_log")  # closing flushed it
    assert logged and CANARY not in json.dumps(logged, default=str)


def test_erasing_a_redacted_record_takes_its_masked_text_too(redacting: World) -> None:
    record_id = _plant(redacting)
    redacting.rt.operations.erase_record(record_id, "asked to")
    assert rows(redacting.rt.store, "SELECT content, redacted_content FROM records WHERE id = ?",
                record_id) == [("", None)]



def _holding(world: World, text: str) -> set[str]:
    """The tables with a row that holds ``text``."""
    return {line.split('"')[1] for line in dump_lines(world.rt.store)
            if line.startswith("INSERT INTO") and text in line}


def _profile(world: World, session_id: str) -> str:
    principal = Principal(AGENT, "aditya", session_id)
    world.rt.hooks.on_session_start(principal)
    return world.rt.profiles.for_session(principal).text


@pytest.mark.hosted
def test_extraction_reads_the_transcript_masked_and_keeps_what_it_read(
        redacting: World, provider: tuple[CompletionClient, AnthropicStub | OpenAIStub]) -> None:
    w, (client, stub) = redacting, provider
    w.say("user", SAID)
    w.say("assistant", "Understood, British English it is.")
    w.rt.hooks.on_session_end(w.p)
    session_id = w.p.session_id
    assert session_id is not None
    # The model can only quote what it was shown: the masked turn.
    output = ExtractionOutput([CandidateRecord(
        type="semantic", content=WANTS, attribute="answer_language", source_kind="user_statement",
        evidence=QUOTE, evidence_turn=1, entity_mentions=[EntityMention("person", "Aditya", "about")],
        confidence=0.9)], SessionSummary("Aditya asked for a sign-off with badge [pii].", [], []))
    stub.script(stub_answer(stub, extraction_schema.output_to_json(output)),
                stub_answer(stub, {"decisions": [{"index": 0, "action": "accept", "reason": "stated",
                                              "revision": None}]}))
    cfg = w.rt.config.ingestion
    runner = w.rt.session_end.using(StructuredLLMExtractor(client, cfg), StructuredLLMReviewer(client, cfg))

    result = runner.run(session_id)

    assert result.outcome == "extracted" and result.counts["written"] == 1, result
    # Nothing raw went to the provider: the transcript and the review window were masked.
    extract_body, review_body = stub.requests
    sent = json.dumps(stub.requests, ensure_ascii=False)
    assert CANARY not in sent
    assert SAID.replace(CANARY, "[pii]") in json.dumps(extract_body, ensure_ascii=False)
    assert SAID.replace(CANARY, "[pii]") in json.dumps(review_body, ensure_ascii=False)
    # The memory is written as extracted, its masked quote found in the turn it names, so it
    # keeps the user's authority and enters the profile.
    (record,) = w.rt.store.find_records(content=WANTS)
    assert (record.content, record.evidence) == (WANTS, QUOTE)
    assert (record.source_kind, record.source_ref) == ("user_statement", f"session:{session_id}<turn:1>")
    assert (record.sensitivity, record.redacted_content) == ("pii", WANTS)
    activation = w.rt.store.activation_of(record.id)
    assert activation is not None and activation.activation == "ambient"
    (summary,) = w.rt.store.find_records(source_kind="session_summary")
    assert summary.sensitivity == "pii" and CANARY not in summary.content
    assert WANTS in _profile(w, "s2")
    # The raw identifier is left in the transcript alone.
    assert _holding(w, CANARY) == {"session_turns"}


def test_a_profile_block_and_the_audit_trail_hold_the_masked_text(redacting: World) -> None:
    w = redacting
    w.say("user", SAID)
    said = {"type": "semantic", "content": WANTS.replace("[pii]", CANARY), "attribute": "answer_language",
            "source_kind": "user_statement", "evidence": QUOTE.replace("[pii]", CANARY)}
    written = w.rt.tools.call("memory_write", w.p, said)
    assert written["activation"] == "ambient", written
    again = w.rt.tools.call("memory_write", w.p, said)  # its reinforcement event quotes the evidence
    assert again["outcome"] == "already_reinforced", again

    # The stored block, served to the agent and kept for audit, shows the record masked; the
    # agent reads the raw text with memory_get, as the block's header says.
    block = _profile(w, "s2")
    assert WANTS in block and CANARY not in block
    got = w.rt.tools.call("memory_get", w.p, {"ids": [written["record_id"]]})
    assert [r["content"] for r in got["records"]] == [said["content"]]

    w.say("user", "My badge was reissued, the number is 987-65-4321 from today.")
    revised = w.rt.tools.call("memory_revise", w.p, {
        "id": written["record_id"], "action": "supersede", "reason": f"the badge {CANARY} was reissued",
        "content": "Aditya wants answers in British English, signed with badge 987-65-4321.",
        "source_kind": "user_statement", "evidence": "the number is 987-65-4321 from today"})
    assert "error" not in revised, revised
    forgot = w.rt.tools.call("memory_forget", w.p, {"id": revised["record_id"],
                                                     "reason": "badge 987-65-4321 is private"})
    assert "error" not in forgot, forgot
    events = json.dumps(w.rt.store.events())
    assert CANARY not in events and "987-65-4321" not in events
    assert "the badge [pii] was reissued" in events
    assert _holding(w, CANARY) == {"session_turns", "records"}


def test_a_replay_recorded_before_masking_is_written_masked(redacting: World, tmp_path: Path) -> None:
    """A recording made before the pack masked anything quotes the raw turn; its candidate
    is stored masked, as a live model's would be, instead of refused for a quote the
    masked transcript does not hold."""
    w = redacting
    w.say("user", SAID)
    w.say("assistant", "Understood, British English it is.")
    w.rt.hooks.on_session_end(w.p)
    session_id = w.p.session_id
    assert session_id is not None
    raw_quote, raw_wants = QUOTE.replace("[pii]", CANARY), WANTS.replace("[pii]", CANARY)
    recorded = ExtractionOutput([CandidateRecord(
        type="semantic", content=raw_wants, attribute="answer_language", source_kind="user_statement",
        evidence=raw_quote, evidence_turn=1, entity_mentions=[EntityMention("person", "Aditya", "about")],
        confidence=0.9)], SessionSummary(f"Aditya asked for a sign-off with badge {CANARY}.", [], []))
    replay = tmp_path / "recorded.json"
    replay.write_text(json.dumps(extraction_schema.output_to_json(recorded)), encoding="utf-8")

    result = w.rt.session_end.using(ReplayExtractor(replay), TableReviewer()).run(session_id)

    assert result.outcome == "extracted" and result.counts["written"] == 1, result
    (record,) = w.rt.store.find_records(content=WANTS)
    assert (record.evidence, record.source_kind, record.sensitivity) == (QUOTE, "user_statement", "pii")
    assert _holding(w, CANARY) == {"session_turns"}  # the turn alone keeps the raw identifier
