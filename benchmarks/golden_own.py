"""The project's own golden set, run by ``make bench`` as a team would run theirs.

The set (``benchmarks/data/golden_own.jsonl``, frozen) was captured from the searches of
one store: the demo's Acme North story (``retold demo``, replayed: the billing contact who
changed, the same question with history, and as of February) and two conversations of the
labelled conversational set (``benchmarks/data/conversations.json``, conversations 0 and 1:
half A and half B), every question of which was asked through ``memory_search``. Capture
took the demo's three searches and a stratified sample of the conversations'; each item is
labelled from the source's own labels (a conversation question's expected records, or
nothing stored for its unanswerable ones; the demo's current contact, both contacts with
history, Dana as of February).

Record ids are part of a label, so the store the set runs against must be that store:
``benchmarks/data/golden_own/`` holds it as one ``retold export`` file per scope, with
history and without vectors (the importing store computes them with its own model). A run
imports them (``retold import --confirm``: ids, lineage, conflicts and statuses as
exported) into a fresh store under ``.bench/golden_own/`` and runs ``retold eval`` on it,
writing ``benchmarks/results/golden.json`` and ``golden.md`` and comparing with the report
there from the last run; the exit status is eval's (3 when a metric regressed).

The store is searched now, on the clock of the machine that runs it, so episodic records
keep ageing between runs; ``--rebuild`` captures, labels and freezes a new set from a new
store (new ids, a new hash, a new series of reports).

Run: ``.venv/bin/python -m benchmarks.golden_own [--config FILE] [--rebuild]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from benchmarks.report import RESULTS, pin_threads  # noqa: E402

pin_threads()

from benchmarks.retrieval_bench import AGENT as CONVERSATION_AGENT  # noqa: E402
from benchmarks.retrieval_bench import load_conversation  # noqa: E402
from retold import build_runtime, load_config  # noqa: E402
from retold.cli import main as retold  # noqa: E402
from retold.clock import SystemClock  # noqa: E402
from retold.demo import AGENT as DEMO_AGENT  # noqa: E402
from retold.demo import USER as DEMO_USER  # noqa: E402
from retold.demo import run_demo  # noqa: E402
from retold.models import Principal, Scope  # noqa: E402
from retold.portable.lines import read_header  # noqa: E402
from retold.quality.capture import capture, snapshot  # noqa: E402
from retold.quality.golden import GoldenItem, GoldenSet, freeze, label, write_golden  # noqa: E402
from retold.runtime import Runtime  # noqa: E402

DATA = Path(__file__).resolve().parent / "data"
GOLDEN = DATA / "golden_own.jsonl"
STORE_FILES = DATA / "golden_own"
CONVERSATIONS = DATA / "conversations.json"
WORK = Path(".bench") / "golden_own"
CHOSEN = (0, 1)  # conversations: one of half A, one of half B
CONVERSATION_ITEMS = 120
# A busy benchmark machine's timings move more than the default tolerance allows.
TOLERANCES = ("--tolerance", "search_p50_ms=300%")


def _environ() -> dict[str, str]:
    """This process's environment without a hosted-model key: the demo replays."""
    return {k: v for k, v in os.environ.items() if k != "ANTHROPIC_API_KEY"}


# -- rebuilding the set -------------------------------------------------------------------


def rebuild(config_file: Path | None) -> None:
    """A new store, its searches, the captured set labelled and frozen, and the store's
    export files, written over the committed ones."""
    with tempfile.TemporaryDirectory(prefix="retold-golden-own-") as tmp:
        demo = run_demo(Path(tmp) / "demo", say=lambda _line: None, use_worker=False, environ=_environ())
        config = load_config(config_file, overrides={"store": {"path": str(demo.store_path)}})
        with build_runtime(config, environ=_environ()) as rt:
            expected = _ask_conversations(rt)
            rt.flush_search_log()
            golden = _labelled(rt, expected)
            STORE_FILES.mkdir(parents=True, exist_ok=True)
            for old in STORE_FILES.glob("*.jsonl"):
                old.unlink()
            for scope in sorted({Scope.parse(item.scope) for item in golden.items}, key=str):
                _export(rt, scope)
    write_golden(GOLDEN, golden)
    print(f"wrote {GOLDEN.name} ({len(golden.items)} items) and {len(list(STORE_FILES.glob('*.jsonl')))}"
          f" store files into {STORE_FILES.relative_to(DATA.parent.parent)}")


def _ask_conversations(rt: Runtime) -> dict[tuple[str, str], list[str]]:
    """Load the chosen conversations and ask each question once; (user, question) ->
    the ids of the records that answer it."""
    data = json.loads(CONVERSATIONS.read_text(encoding="utf-8"))
    expected: dict[tuple[str, str], list[str]] = {}
    for index in CHOSEN:
        conv = data["conversations"][index]
        ids = {key: rid for rid, key in load_conversation(rt, conv).items()}
        who = Principal(CONVERSATION_AGENT, conv["user"], f"golden-{conv['user']}")
        for question in conv["questions"]:
            rt.tools.call("memory_search", who, {"queries": [question["text"]]})
            expected[(conv["user"], question["text"])] = [ids[key] for key in question["expected"]]
    return expected


def _labelled(rt: Runtime, expected: dict[tuple[str, str], list[str]]) -> GoldenSet:
    now = rt.clock.now()
    users = sorted({user for user, _ in expected})
    demo = capture(rt.store, size=10, seed=0, now=now, source="", scopes=[Scope("user", DEMO_USER)]).golden
    talks = capture(rt.store, size=CONVERSATION_ITEMS, seed=0, now=now, source="",
                    scopes=[Scope("user", user) for user in users]).golden
    items = tuple(replace(item, id=f"q{n:04d}") for n, item in enumerate(demo.items + talks.items, 1))
    source = (f"benchmarks.golden_own: the demo's {len(demo.items)} searches and {len(talks.items)} of the"
              f" questions of conversations {', '.join(map(str, CHOSEN))} of conversations.json")
    golden = GoldenSet(replace(demo.header, source=source), items)
    contacts = rt.store.find_records(scopes=[Scope("user", DEMO_USER)])
    current = next(r.id for r in contacts if r.attribute == "billing_contact" and r.status == "confirmed")
    former = next(r.id for r in contacts if r.attribute == "billing_contact" and r.status == "superseded")
    for item in items:
        if item.principal.user_id == DEMO_USER:
            answer = ([former] if item.filters.as_of else
                      [current, former] if item.filters.include_history else [current])
            text = "Dana Reyes" if item.filters.as_of else "Marcus Chen"
        else:
            answer, text = expected[(item.principal.user_id, item.question[0])], None
        golden = _label(rt, golden, item, answer, text)
    return freeze(golden, SystemClock().now())


def _label(rt: Runtime, golden: GoldenSet, item: GoldenItem, answer: list[str],
           text: str | None) -> GoldenSet:
    if not answer:
        return label(golden, item.id, nothing_stored=True)
    shown = {c.id for c in item.candidates}
    added = [snapshot(record, None) for record in rt.store.records([a for a in answer if a not in shown])]
    return label(golden, item.id, expected=answer, answer=text, added=added)


def _export(rt: Runtime, scope: Scope) -> None:
    """One scope's export file, its vectors left out."""
    path = STORE_FILES / f"{str(scope).replace(':', '-')}.jsonl"
    with path.open("w", encoding="utf-8") as out:
        rt.operations.export(scope, out, include_history=True)
    lines = []
    for line in path.read_text(encoding="utf-8").splitlines():
        data = json.loads(line)
        if data.get("vector") is not None:
            data["vector"] = None
        lines.append(json.dumps(data, ensure_ascii=False, sort_keys=True))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


# -- running it ---------------------------------------------------------------------------


def run(config_file: Path | None, results: Path, work: Path) -> int:
    """Import the store files into a fresh store and evaluate the set on it; eval's exit status."""
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    store = work / "memory.sqlite"
    config = load_config(config_file, overrides={"store": {"path": str(store)}})
    with build_runtime(config, environ=_environ()) as rt:
        for path in sorted(STORE_FILES.glob("*.jsonl")):
            _import(rt, path)
    args = ["eval", str(GOLDEN), "--store", str(store), "--report-dir", str(results),
            "--report-name", "golden", *TOLERANCES]
    if config_file is not None:
        args += ["--config", str(config_file)]
    return retold(args)


def _import(rt: Runtime, path: Path) -> None:
    with path.open(encoding="utf-8") as lines:
        scope = read_header(lines.readline()).scope
    agent = DEMO_AGENT if scope.id == DEMO_USER else CONVERSATION_AGENT
    rt.host.grant(agent, scope, read=True, write=True)
    with path.open(encoding="utf-8") as lines:
        result = rt.operations.import_lines(lines, Principal(agent, scope.id), confirm=True,
                                            actor="golden_own")
    if result.failed:
        failure = result.failed[0]
        raise SystemExit(f"{path.name} line {failure.line}: {failure.reason}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", type=Path, help="a config file (default: the defaults)")
    parser.add_argument("--rebuild", action="store_true",
                        help="capture, label and freeze a new set from a new store (new ids, a new series)")
    parser.add_argument("--results-dir", type=Path, default=RESULTS)
    parser.add_argument("--work", type=Path, default=WORK, help="where the store is imported")
    args = parser.parse_args()
    if args.rebuild:
        rebuild(args.config)
    sys.exit(run(args.config, args.results_dir, args.work))


if __name__ == "__main__":
    main()

