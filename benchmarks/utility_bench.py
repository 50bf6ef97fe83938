"""Host-issued memory decided by need: does it help without polluting, and what does it cost.

Reads ``benchmarks/data/utility_turns.json``: twelve facts about one user, stored first
through ``memory_write``, and 36 labelled turns: ``ordinary`` (nothing stored is on
topic), ``needed`` (one named fact should change the answer) and ``present`` (a stored
fact is on topic but should not change the answer). Each turn runs through
``MemorySession.respond`` on a fresh session, with the real embedder and store, under
three pairs of planner and judge:

- ``relevance only (host recall)``: no orchestrator; one host-issued search per turn under
  the host-issued threshold, all of it shown: the baseline to beat on pollution and help.
- ``gaps, no judge``: a planner that names the labelled gap of every needed and present
  turn (so it over-plans on the present ones) and a judge that admits every candidate.
- ``gaps, oracle judge``: the same planner and a judge that admits exactly the needed fact.
  Its help rate is the gap searches' recall: the most any judge can admit.
- ``hosted`` (only with a key in ``hosted.api_key_env``): the configured planner and
  judge models, and the same model drafting the reply.

Reported per configuration: pollution (turns that need no memory, ordinary or present,
where any record was admitted), help (needed turns where the needed fact was admitted),
draft changed (turns answered a second time), hosted calls and decision time per turn.
The benchmark's own store records a pass for each configuration so regeneration runs;
for the baseline, "draft changed" is any turn where something was shown.

The overhead of a turn the planner answers ``no_gap`` is measured against the hosted
call alone, with the real Anthropic SDK against a loopback stub that answers after a
fixed 100 ms: interleaved pairs of a bare planner call and a whole ``respond``, p50 and
p95 of each, and the difference of the medians (target: at most 5 ms).

Writes ``benchmarks/results/utility.{json,md}`` and ``utility_components.json`` (the
components of the last configuration evaluated, with its figures), which
``retold bundles record`` accepts.

Run: ``.venv/bin/python -m benchmarks.utility_bench [--pairs N]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from benchmarks.report import RESULTS, machine, pin_threads, summarize, write_report  # noqa: E402

pin_threads()

from retold import build_runtime, load_config  # noqa: E402
from retold.hosted import AnthropicClient, CompletionClient, CompletionRequest, Message  # noqa: E402
from retold.models import Scope, SearchRequest  # noqa: E402
from retold.runtime import Runtime  # noqa: E402
from retold.testing.anthropic_stub import serve_anthropic_stub, tool_use  # noqa: E402
from retold.utility.admission import AdmissionInput, HostedAdmissionJudge  # noqa: E402
from retold.utility.bundles import bundle_hash  # noqa: E402
from retold.utility.decision import Gap, Verdict  # noqa: E402
from retold.utility.planner import HostedGapPlanner, PlannerInput, ScriptedPlanner  # noqa: E402

DATA = Path(__file__).resolve().parent / "data" / "utility_turns.json"
AGENT, USER = "bench-agent", "maya"
STUB_LATENCY_S = 0.1


class LabelPlanner(ScriptedPlanner):
    """Names the gap the label gives (needed and present turns), none on ordinary turns: a
    planner that finds every real gap and over-plans on every on-topic turn."""

    def __init__(self, gaps: Mapping[str, str]) -> None:
        super().__init__(version="labelled-gaps/1")
        self._gaps = gaps

    def plan(self, asked: PlannerInput, timeout_ms: int) -> list[Gap]:
        self.calls.append(asked)
        need = self._gaps.get(asked.turn)
        return [Gap(need, need)] if need else []


class LabelJudge:
    """Admits what ``admit(turn, content)`` says; no model."""

    def __init__(self, version: str, admit: Callable[[str, str], bool]) -> None:
        self.version, self._admit = version, admit

    def judge(self, asked: AdmissionInput, timeout_ms: int) -> list[Verdict]:
        return [Verdict(c.record_id, "fills" if self._admit(asked.turn, c.content) else "not_needed", "label")
                for c in asked.candidates]


def _runtime(store: Path, planner: Any, judge: Any, environ: Mapping[str, str], *,
             enabled: bool = True) -> Runtime:
    config = load_config(None).replace({
        "store": {"path": str(store)},
        "retrieval": {"trigger": {"mode": "hybrid"}},
        "utility": {"enabled": enabled},
        "queue": {"scheduler": "in_process"},
    })
    return build_runtime(config, planner=planner, admission=judge, environ=environ)


def _seed(rt: Runtime, facts: Mapping[str, str]) -> dict[str, str]:
    """Store the facts; their record ids by key."""
    rt.host.grant(AGENT, Scope("user", USER), read=True, write=True)
    rt.host.provision_user(USER, aliases=["Maya"])
    ids = {}
    with rt.session(AGENT, USER, session_id="seed") as s:
        for key, content in facts.items():
            written = s.write(content, attribute=key, source_kind="agent_inference")
            ids[key] = written["record_id"]
    rt.refresh_index()
    return ids


def evaluate(name: str, rt: Runtime, turns: list[dict[str, Any]],
             draft: Callable[[str, str | None], str]) -> dict[str, Any]:
    """Every turn on a fresh session; the figures for one configuration."""
    orchestrator = rt.orchestrator
    assert orchestrator is not None
    rt.store.record_bundle_result(orchestrator.bundle, orchestrator.components, passed=True,
                                  evidence="the benchmark's own store", by="utility_bench")
    facts = {r.id: r.attribute for r in rt.store.find_records(scopes=[Scope("user", USER)])}
    rows = []
    for i, turn in enumerate(turns):
        with rt.session(AGENT, USER, session_id=f"{name}-{i}") as s:
            s.say("user", turn["text"])
            text: str = turn["text"]
            s.respond(lambda recalled: draft(text, recalled))  # noqa: B023 - called before the loop moves on
            decision = s.last_decision
        assert decision is not None
        admitted = [facts.get(r) for r in decision.admitted]
        rows.append({"kind": turn["kind"], "fact": turn.get("fact"), "disposition": decision.disposition,
                     "admitted": admitted, "ms": decision.timings_ms["total"],
                     "hosted_calls": decision.hosted_calls, "tokens": decision.hosted_tokens})
    return _figures(name, rows, orchestrator.components)


def evaluate_recall(rt: Runtime, turns: list[dict[str, Any]]) -> dict[str, Any]:
    """Today's host-issued recall without the orchestrator: one search per user turn under
    the host-issued threshold, everything it finds shown."""
    facts = {r.id: r.attribute for r in rt.store.find_records(scopes=[Scope("user", USER)])}
    rows = []
    for i, turn in enumerate(turns):
        with rt.session(AGENT, USER, session_id=f"recall-{i}") as s:
            s.say("user", turn["text"])
            started = time.perf_counter()
            found = rt.tools.search(s.principal, SearchRequest(
                queries=[turn["text"]], k=rt.config.retrieval.trigger.host_k, trigger="host"))
            ms = (time.perf_counter() - started) * 1000
        admitted = [facts.get(r["id"]) for r in found["results"]]
        rows.append({"kind": turn["kind"], "fact": turn.get("fact"),
                     "disposition": "regenerated" if admitted else "no_candidates",
                     "admitted": admitted, "ms": ms, "hosted_calls": 0, "tokens": 0})
    return _figures("relevance only (host recall)", rows, {"recall": "host-issued search, no orchestrator"})


def _figures(name: str, rows: list[dict[str, Any]], components: dict[str, Any]) -> dict[str, Any]:
    quiet = [r for r in rows if r["kind"] != "needed"]
    needed = [r for r in rows if r["kind"] == "needed"]
    return {
        "configuration": name,
        "bundle": bundle_hash(components),
        "components": components,
        "pollution": round(sum(1 for r in quiet if r["admitted"]) / len(quiet), 3),
        "pollution_ordinary": round(sum(1 for r in quiet if r["admitted"] and r["kind"] == "ordinary")
                                    / sum(1 for r in quiet if r["kind"] == "ordinary"), 3),
        "help": round(sum(1 for r in needed if r["fact"] in r["admitted"]) / len(needed), 3),
        "draft_changed": round(sum(1 for r in rows if r["disposition"] == "regenerated") / len(rows), 3),
        "hosted_calls_per_turn": round(statistics.mean(r["hosted_calls"] for r in rows), 2),
        "tokens_per_turn": round(statistics.mean(r["tokens"] for r in rows), 1),
        "decision_ms": summarize([r["ms"] for r in rows]),
        "dispositions": {d: sum(1 for r in rows if r["disposition"] == d)
                         for d in sorted({r["disposition"] for r in rows})},
        "turns": rows,
    }


def overhead(pairs: int) -> dict[str, Any]:
    """A ``no_gap`` turn's time beyond the planner's own hosted call."""
    with serve_anthropic_stub() as stub, tempfile.TemporaryDirectory() as tmp:
        client = AnthropicClient("claude-haiku-4-5-20251001", "bench-key", base_url=stub.base_url,
                                 max_retries=0)
        planner = HostedGapPlanner(client, 1024)
        rt = _runtime(Path(tmp) / "overhead.sqlite", planner, None, {})
        rt.host.grant(AGENT, Scope("user", USER), read=True, write=True)
        asked = PlannerInput("What is the boiling point of water at sea level?", "", "", 3)
        bare_ms, whole_ms = [], []
        for i in range(pairs + 3):  # the first three warm the SDK and the store
            stub.script(tool_use({"gaps": []}, delay_s=STUB_LATENCY_S),
                        tool_use({"gaps": []}, delay_s=STUB_LATENCY_S))
            started = time.perf_counter()
            planner.plan(asked, 5000)
            bare = (time.perf_counter() - started) * 1000
            with rt.session(AGENT, USER, session_id=f"overhead-{i}") as s:
                s.say("user", asked.turn)
                started = time.perf_counter()
                s.respond(lambda recalled: "draft")
                whole = (time.perf_counter() - started) * 1000
                assert s.last_decision is not None and s.last_decision.disposition == "no_gap"
            if i >= 3:
                bare_ms.append(bare)
                whole_ms.append(whole)
        rt.close()
    bare_s, whole_s = summarize(bare_ms), summarize(whole_ms)
    return {"stub_latency_ms": STUB_LATENCY_S * 1000, "planner_call_ms": bare_s, "respond_ms": whole_s,
            "overhead_p50_ms": round(whole_s["p50"] - bare_s["p50"], 3),
            "overhead_p95_ms": round(whole_s["p95"] - bare_s["p95"], 3)}


def _hosted(rt_factory: Callable[..., Runtime],
            environ: Mapping[str, str]) -> tuple[str, Any, Any, Any] | None:
    """The configured planner, judge and a drafting client, when a key is set, under a label
    naming the models: a hosted figure means nothing without them."""
    config = load_config(None)
    key = environ.get(config.hosted.api_key_env, "").strip()
    if not key:
        return None
    probe = rt_factory(None, None)
    try:
        planner_client = probe.hosted_client(config.utility.planner_model)
        judge_client = probe.hosted_client(config.utility.admission_model)
    finally:
        probe.close()
    if planner_client is None or judge_client is None:
        return None
    label = f"hosted: planner {config.utility.planner_model}, judge {config.utility.admission_model}"
    return (label, HostedGapPlanner(planner_client, 1024), HostedAdmissionJudge(judge_client, 1024),
            planner_client)


def _drafter(client: CompletionClient) -> Callable[[str, str | None], str]:
    schema = {"type": "object", "properties": {"reply": {"type": "string"}}, "required": ["reply"],
              "additionalProperties": False}

    def draft(turn: str, recalled: str | None) -> str:
        shown = turn if recalled is None else f"{turn}\n\n{recalled}"
        answer = client.complete(CompletionRequest(
            system="You are a helpful assistant. Answer the user's message briefly.",
            messages=(Message("user", shown),), schema=schema, schema_name="reply",
            max_output_tokens=400, timeout_ms=30000))
        return str(answer["reply"])

    return draft


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=40, help="overhead pairs (default 40)")
    parser.add_argument("--no-report", action="store_true", help="do not write benchmarks/results")
    args = parser.parse_args()
    data = json.loads(DATA.read_text(encoding="utf-8"))
    facts, turns = data["facts"], data["turns"]
    by_text = {t["text"]: t for t in turns}

    def needed(turn: str, content: str) -> bool:
        label = by_text[turn]
        return bool(label["kind"] == "needed" and content == facts[label["fact"]])

    results = []
    with tempfile.TemporaryDirectory() as tmp:
        def runtime(planner: Any, judge: Any, environ: Mapping[str, str] | None = None,
                    enabled: bool = True) -> Runtime:
            return _runtime(Path(tmp) / "utility.sqlite", planner, judge, environ or {}, enabled=enabled)

        labelled = {t["text"]: t["gap"] for t in turns if t.get("gap")}
        configurations: list[tuple[str, Any, Any, Callable[[str, str | None], str]]] = [
            ("gaps, no judge", LabelPlanner(labelled), LabelJudge("admit-all/1", lambda turn, content: True),
             _fixed_draft),
            ("gaps, oracle judge", LabelPlanner(labelled), LabelJudge("oracle/1", needed), _fixed_draft),
        ]
        hosted = _hosted(lambda p, j: runtime(p, j, os.environ), os.environ)
        if hosted is not None:
            label, planner, judge, client = hosted
            configurations.append((label, planner, judge, _drafter(client)))
        with runtime(None, None, enabled=False) as rt:
            _seed(rt, facts)
            results.append(evaluate_recall(rt, turns))
        for name, planner, judge, draft in configurations:
            rt = runtime(planner, judge, os.environ if name.startswith("hosted") else {})
            results.append(evaluate(name, rt, turns, draft))
            rt.close()
    cost = overhead(args.pairs)
    print(json.dumps({r["configuration"]: {k: r[k] for k in ("pollution", "help", "draft_changed")}
                      for r in results}, indent=2))
    print(json.dumps(cost, indent=2))
    if args.no_report:
        return
    last = results[-1]
    (RESULTS / "utility_components.json").write_text(json.dumps({
        "bundle": last["bundle"], "components": last["components"], "evaluated_with": last["configuration"],
        "figures": {k: last[k] for k in ("pollution", "help", "draft_changed", "decision_ms")},
    }, indent=2) + "\n")
    table = [["configuration", "pollution (ordinary)", "help", "draft changed", "hosted calls / turn",
              "decision p50 / p95 ms"]]
    for r in results:
        table.append([r["configuration"], f"{r['pollution']:.3f} ({r['pollution_ordinary']:.3f})",
                      f"{r['help']:.3f}", f"{r['draft_changed']:.3f}", f"{r['hosted_calls_per_turn']:.2f}",
                      f"{r['decision_ms']['p50']:.1f} / {r['decision_ms']['p95']:.1f}"])
    table.append(["no_gap overhead vs the planner call alone (p50 / p95 ms)",
                  f"{cost['overhead_p50_ms']:.2f} / {cost['overhead_p95_ms']:.2f}", "", "", "1.00",
                  f"{cost['respond_ms']['p50']:.1f} / {cost['respond_ms']['p95']:.1f}"])
    notes = ("36 labelled turns (12 ordinary, 12 needed, 12 present: memory on topic that should not change "
             "the answer) over 12 stored facts; pollution counts ordinary and present turns with any record "
             "admitted. Without a hosted key only the scripted configurations run: they measure the "
             "retrieval half (relevance-only pollution, the gap searches' recall) and the mechanics, not a "
             "model's judgement. Overhead: a no_gap turn against the bare planner call, real SDK, loopback "
             f"stub answering after {STUB_LATENCY_S * 1000:.0f} ms, {args.pairs} interleaved pairs.")
    write_report("utility", {"machine": machine(), "configurations": results, "overhead": cost}, table, notes)


def _fixed_draft(turn: str, recalled: str | None) -> str:
    return "draft reply" if recalled is None else "reply with memory"


if __name__ == "__main__":
    main()
