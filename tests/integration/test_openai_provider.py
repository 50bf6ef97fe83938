"""``hosted.provider: openai`` end to end: a runtime built from config alone extracts,
reviews and rewrites through the real openai SDK against the loopback Chat Completions
stub, and without its key it reports not configured instead of calling anything."""

from __future__ import annotations

from retold.hosted import OpenAIClient
from retold.ingest.extractor import output_to_json
from retold.models import CandidateRecord, ExtractionOutput, SessionSummary
from retold.runtime import Runtime, build_runtime
from retold.testing import AGENT, World
from retold.testing.openai_stub import OpenAIStub, answer, error

MODEL = "meta-llama/Llama-3.1-8B-Instruct"  # any name the server knows, as vLLM serves it
SAYS = "I deploy the billing service with the blue-green script, never the old one."
FACT = CandidateRecord(
    type="procedural", content="Aditya deploys the billing service with the blue-green script.",
    attribute="billing_deploy_method", source_kind="user_statement",
    evidence="I deploy the billing service with the blue-green script", evidence_turn=1,
    entity_mentions=[], confidence=0.9,
)
EXTRACTED = output_to_json(ExtractionOutput([FACT], SessionSummary("Aditya described his deploys.", [], [])))
REVIEWED = {"decisions": [{"index": 0, "action": "accept", "reason": "stated", "revision": None}]}


def openai_runtime(world: World, stub: OpenAIStub, environ: dict[str, str]) -> Runtime:
    """A second process on the world's store, configured for an OpenAI-compatible server."""
    config = world.rt.config.replace({
        "hosted": {"provider": "openai", "base_url": stub.base_url, "api_key_env": "VLLM_API_KEY"},
        "ingestion": {"extraction_model": MODEL, "review_model": MODEL},
        "retrieval": {"rewrite": {"enabled": True, "model": MODEL, "timeout_ms": 3000}},
        "queue": {"scheduler": "in_process"},
    })
    return build_runtime(config, clock=world.clock, embedder=world.embedder, judge=world.judge,
                         environ=environ)


def test_a_session_ended_on_a_runtime_configured_for_openai_is_extracted_and_reviewed(
    world: World, openai_stub: OpenAIStub
) -> None:
    openai_stub.script(answer(EXTRACTED), answer(REVIEWED))
    with openai_runtime(world, openai_stub, {"VLLM_API_KEY": "sk-local"}) as rt:
        with rt.session(AGENT, "aditya", session_id="deploys") as session:
            session.say("user", SAYS)
            session.say("assistant", "Noted.")

        (record,) = rt.store.find_records(content=FACT.content)
        assert record.source_kind == "user_statement" and record.attribute == FACT.attribute
        (run,) = rt.store.events(kind="extraction.run")
        assert run["payload"]["extractor"] == run["payload"]["reviewer"] == f"llm:{MODEL}"
    extract_body, review_body = openai_stub.requests
    assert extract_body["model"] == review_body["model"] == MODEL
    assert extract_body["response_format"]["json_schema"]["name"] == "record_extraction"
    assert review_body["tool_choice"]["function"]["name"] == "candidate_review"
    assert openai_stub.api_keys == ["sk-local", "sk-local"]


def test_the_rewriter_of_a_runtime_configured_for_openai_rewrites_through_it(
    world: World, openai_stub: OpenAIStub
) -> None:
    rewritten = ["Aditya's billing service deploy method"]
    openai_stub.script(answer({"queries": rewritten}))
    with openai_runtime(world, openai_stub, {"VLLM_API_KEY": "sk-local"}) as rt:
        result = rt.tools.call("memory_search", world.p, {"queries": ["how does he deploy it?"]},
                               context="user: How does Aditya deploy billing?")

    assert (result["rewrite_status"], result["rewritten_queries"]) == ("applied", rewritten)
    (body,) = openai_stub.requests
    assert body["response_format"]["json_schema"]["name"] == "rewritten_queries"
    assert "how does he deploy it?" in body["messages"][1]["content"]


def test_a_failing_openai_server_leaves_the_search_with_its_raw_queries(
    world: World, openai_stub: OpenAIStub
) -> None:
    openai_stub.script(error(503))
    with openai_runtime(world, openai_stub, {"VLLM_API_KEY": "sk-local"}) as rt:
        result = rt.tools.call("memory_search", world.p, {"queries": ["how does he deploy it?"]})

    assert result["rewrite_status"] == "failed" and result["rewritten_queries"] is None
    assert len(openai_stub.requests) == 1  # the rewriter never retries: its deadline is too short


def test_without_the_key_nothing_is_called_and_extraction_is_not_configured(
    world: World, openai_stub: OpenAIStub
) -> None:
    with openai_runtime(world, openai_stub, {"OPENAI_API_KEY": "a key in another variable"}) as rt:
        assert rt.extractor is None and rt.reviewer is None
        assert rt.hosted_client(MODEL) is None
        world.say("user", SAYS)
        rt.hooks.on_session_end(world.p)
        assert rt.store.find_records(content=FACT.content) == []
    assert openai_stub.requests == []


def test_the_runtime_hands_the_openai_client_its_configured_endpoint(
    world: World, openai_stub: OpenAIStub
) -> None:
    with openai_runtime(world, openai_stub, {"VLLM_API_KEY": "sk-local"}) as rt:
        client = rt.hosted_client(MODEL)
    assert isinstance(client, OpenAIClient) and client.base_url == openai_stub.base_url
