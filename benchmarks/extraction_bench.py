"""Session-extraction benchmark: pipeline time per session, model latency excluded.

The production wiring (``rt.extractor`` and ``rt.reviewer``: StructuredLLMExtractor and
StructuredLLMReviewer over the real Anthropic SDK) talks to the in-process loopback stub
from ``tests/stub_anthropic.py``, which answers every request at once with a valid tool
call. Embeddings come from the FakeEmbedder (``embedding.model: fake``) and duplicates
are judged by the exact judge, so no model time is in the figures at all.

For sessions of 20 and 100 turns with 5 and 20 candidates (every candidate accepted by the
reviewer and written), it extracts ``--sessions`` sessions per combination in one store
(after ``--warmup`` untimed ones) and reports:

- pipeline: wall time of ``extract_session`` minus the time spent in the SDK round trips
  to the stub (``AnthropicClient._call``); schema validation of the answers, context
  building, evidence checks, review context, the write transaction, the summary and the
  index refresh all count as pipeline;
- hosted calls per session, read from the stub's request log.

Targets: <= 2 hosted calls per session; pipeline p50 <= 50 ms for 20 turns / 5 candidates.

Run: ``.venv/bin/python -m benchmarks.extraction_bench [--sessions 15] [--warmup 2]``.
Writes benchmarks/results/extraction.json and extraction.md.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.report import machine, pin_threads, summarize, write_report  # noqa: E402

pin_threads()

from retold import build_runtime, load_config  # noqa: E402
from retold.hosted import CompletionClient  # noqa: E402
from retold.ingest.extractor import StructuredLLMExtractor, output_to_json  # noqa: E402
from retold.ingest.reviewer import StructuredLLMReviewer  # noqa: E402
from retold.models import CandidateRecord, ExtractionOutput, Principal, Scope, SessionSummary  # noqa: E402
from retold.runtime import Runtime  # noqa: E402
from retold.testing.anthropic_stub import AnthropicStub, serve_anthropic_stub, tool_use  # noqa: E402

AGENT, USER = "bench-agent", "aditya"
SHAPES = [(20, 5), (20, 20), (100, 5), (100, 20)]  # (turns, candidates)
TOPICS = ["deploy", "billing", "editor", "timezone", "review", "testing", "release", "oncall",
          "coffee", "language", "framework", "database", "dashboard", "meeting", "travel"]
STAGES = ["transcript_prep", "extractor_model", "validation", "candidate_review", "writes",
          "summary_write", "total"]
TARGET_CALLS = 2
TARGET_P50_MS = 50.0  # for 20 turns / 5 candidates


class RoundTrips:
    """Wraps a client's ``_call`` (one SDK request to the stub) and adds up its time."""

    def __init__(self, client: CompletionClient) -> None:
        self.ms = 0.0
        inner: Callable[[Any], object] = client._call

        def timed(request: Any) -> object:
            started = time.perf_counter()
            try:
                return inner(request)
            finally:
                self.ms += (time.perf_counter() - started) * 1000

        client._call = timed  # type: ignore[method-assign]


def session_script(tag: str, turns: int, candidates: int) -> tuple[list[tuple[str, str]], dict[str, Any]]:
    """The transcript and the extraction answer of one session: ``candidates`` distinct
    facts, each quoted verbatim from a user turn, spread evenly over the session (a user
    turn states more than one fact when there are more candidates than user turns)."""
    user_turns = list(range(1, turns + 1, 2))
    per_turn = -(-candidates // len(user_turns))  # facts stated in each user turn
    transcript: list[tuple[str, str]] = []
    for n in range(1, turns + 1):
        topic = TOPICS[n % len(TOPICS)]
        if n % 2:
            facts = " and ".join(f"I always use tool-{tag}-{n}-{k}" for k in range(per_turn))
            transcript.append(("user", f"For the {topic} work {facts} because it keeps {topic} "
                                       f"changes reproducible and easy to review."))
        else:
            transcript.append(("assistant", f"Noted: your {topic} tools. Anything else?"))
    slots = [(n, k) for k in range(per_turn) for n in user_turns]
    step = len(slots) / candidates
    chosen = sorted((slots[int(i * step)] for i in range(candidates)), key=lambda s: s[0])
    proposed = [
        CandidateRecord(
            type="semantic", content=f"Aditya uses tool-{tag}-{n}-{k} for {TOPICS[n % len(TOPICS)]} work.",
            attribute=f"{TOPICS[n % len(TOPICS)]}_tool_{n}_{k}", source_kind="user_statement",
            evidence=f"I always use tool-{tag}-{n}-{k}", evidence_turn=n, entity_mentions=[],
            confidence=0.8,
        )
        for n, k in chosen
    ]
    summary = SessionSummary(
        f"Aditya went through tool choices for session {tag}. The agent noted each one. "
        f"{candidates} tools were confirmed for later work.", [f"{candidates} tools confirmed"], [])
    return transcript, output_to_json(ExtractionOutput(proposed, summary))


def review_answer(candidates: int) -> dict[str, Any]:
    return {"decisions": [{"index": i, "action": "accept", "reason": "stated by the user", "revision": None}
                          for i in range(candidates)]}


def run_shape(tmp: Path, stub: AnthropicStub, turns: int, candidates: int, sessions: int,
              warmup: int) -> dict[str, Any]:
    config = load_config(overrides={
        "store": {"path": str(tmp / f"extraction_{turns}_{candidates}.sqlite")},
        "embedding": {"model": "fake"},
        "ingestion": {"equivalence": {"model": "exact"}},
        "hosted": {"base_url": stub.base_url},
    })
    rt: Runtime = build_runtime(config, environ={"ANTHROPIC_API_KEY": "bench-key"})
    rt.host.grant(AGENT, Scope("user", USER), read=True, write=True)
    rt.host.provision_user(USER, aliases=["Aditya"])
    extractor, reviewer = rt.extractor, rt.reviewer
    assert isinstance(extractor, StructuredLLMExtractor) and isinstance(reviewer, StructuredLLMReviewer)
    clients = {id(extractor.client): extractor.client, id(reviewer.client): reviewer.client}
    trips = [RoundTrips(c) for c in clients.values()]
    for client in clients.values():
        client.prepare()  # import the SDK now, not inside the first timed session

    pipeline, wall, hosted, calls = [], [], [], []
    prompt_chars: dict[str, list[float]] = {"extract": [], "review": []}
    stages: dict[str, list[float]] = {s: [] for s in STAGES}
    outcomes: dict[str, int] = {}
    for i in range(warmup + sessions):
        tag = f"{turns}t{candidates}c{i}"
        principal = Principal(AGENT, USER, f"bench-{tag}", None)
        rt.hooks.on_session_start(principal)
        transcript, answer = session_script(tag, turns, candidates)
        for role, text in transcript:
            principal = rt.hooks.on_turn(principal, role, text)
        rt.hooks.on_session_end(principal)
        assert principal.session_id is not None
        stub.script(tool_use(answer), tool_use(review_answer(candidates)))
        requests_before, trip_before = len(stub.requests), sum(t.ms for t in trips)
        started = time.perf_counter()
        result = rt.session_end.run(principal.session_id)
        elapsed = (time.perf_counter() - started) * 1000
        assert result.outcome == "extracted", result
        assert result.counts.get("written") == candidates, result.counts
        if i < warmup:
            continue
        trip = sum(t.ms for t in trips) - trip_before
        wall.append(elapsed)
        hosted.append(trip)
        pipeline.append(elapsed - trip)
        calls.append(len(stub.requests) - requests_before)
        for body in stub.requests[requests_before:]:
            kind = "extract" if body["tool_choice"]["name"] == "record_extraction" else "review"
            prompt_chars[kind].append(float(len(body["messages"][0]["content"])))
        timings = rt.store.events(kind="extraction.run")[-1]["payload"]["timings_ms"]
        for stage in STAGES:
            stages[stage].append(float(timings.get(stage, 0.0)))
        for key, value in result.counts.items():
            outcomes[key] = outcomes.get(key, 0) + value
    records = [r for r in rt.store.find_records() if r.source_kind != "session_summary"]
    rt.close()
    return {
        "turns": turns, "candidates": candidates, "sessions": sessions, "warmup": warmup,
        "pipeline_ms": summarize(pipeline), "wall_ms": summarize(wall),
        "hosted_round_trip_ms": summarize(hosted),
        "hosted_calls_per_session": {"min": min(calls), "max": max(calls)},
        "prompt_chars": {k: summarize(v) for k, v in prompt_chars.items()},
        "run_event_timings_ms": {s: summarize(v) for s, v in stages.items()},
        "counts_total": outcomes, "records_in_store_at_end": len(records),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=15)
    parser.add_argument("--warmup", type=int, default=2)
    args = parser.parse_args()
    results: dict[str, Any] = {
        "machine": machine(), "embedder": "fake", "judge": "exact",
        "hosted": "real anthropic SDK -> in-process loopback stub (instant answers)",
        "targets": {"hosted_calls_per_session_max": TARGET_CALLS,
                    "pipeline_p50_ms_max_20_turns_5_candidates": TARGET_P50_MS},
        "shapes": {},
    }
    table = [["turns", "candidates", "pipeline p50 / p95 (ms)", "wall p50 (ms)", "SDK round trips p50 (ms)",
              "writes stage p50 (ms)", "hosted calls / session", "extract / review prompt p50 (chars)"]]
    with tempfile.TemporaryDirectory() as tmp, serve_anthropic_stub() as stub:
        for turns, candidates in SHAPES:
            row = run_shape(Path(tmp), stub, turns, candidates, args.sessions, args.warmup)
            results["shapes"][f"{turns}x{candidates}"] = row
            calls = row["hosted_calls_per_session"]
            table.append([
                str(turns), str(candidates),
                f"{row['pipeline_ms']['p50']:.1f} / {row['pipeline_ms']['p95']:.1f}",
                f"{row['wall_ms']['p50']:.1f}", f"{row['hosted_round_trip_ms']['p50']:.1f}",
                f"{row['run_event_timings_ms']['writes']['p50']:.1f}",
                str(calls["max"]) if calls["min"] == calls["max"] else f"{calls['min']}-{calls['max']}",
                f"{row['prompt_chars']['extract']['p50']:.0f} / {row['prompt_chars']['review']['p50']:.0f}",
            ])
            print(" | ".join(table[-1]), flush=True)
    shapes = results["shapes"]
    max_calls = max(r["hosted_calls_per_session"]["max"] for r in shapes.values())
    small_p50 = shapes["20x5"]["pipeline_ms"]["p50"]
    results["verdict"] = {
        "hosted_calls_per_session_max": max_calls, "calls_ok": max_calls <= TARGET_CALLS,
        "pipeline_p50_ms_20x5": small_p50, "pipeline_ok": small_p50 <= TARGET_P50_MS,
    }
    verdict = (f"Targets: <= {TARGET_CALLS} hosted calls per session (max seen {max_calls}: "
               f"{'met' if max_calls <= TARGET_CALLS else 'MISSED'}); pipeline p50 <= {TARGET_P50_MS:.0f} ms "
               f"for 20 turns / 5 candidates ({small_p50:.1f} ms: "
               f"{'met' if small_p50 <= TARGET_P50_MS else 'MISSED'}).")
    print(verdict)
    write_report("extraction", results, table, notes=(
        f"{verdict} Pipeline = extract_session wall time minus the SDK round trips to an instant "
        f"loopback stub; fake embedder, exact judge; every candidate accepted and written; "
        f"{args.sessions} timed sessions per shape after {args.warmup} warm-up sessions, "
        f"one store per shape."))


if __name__ == "__main__":
    main()
