"""``retold golden capture|label|freeze|show`` and ``retold eval``: a golden set from this
deployment's own searches, and its run against a store as a gate a release must pass.

Both only read the store: it is opened read-only, and the searches ``eval`` runs leave no
search-log row. See docs/operations.md, "Tracking quality per release".
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any

from retold.cli.common import (
    EXIT_USAGE,
    Refused,
    add_command,
    cli_config,
    missing_store_of,
    positive,
    scope_arg,
)
from retold.config import Config, config_to_dict

if TYPE_CHECKING:
    from retold.quality.answering import AnswerReport, TokenPrice
    from retold.quality.golden import GoldenItem, GoldenSet, Snapshot
    from retold.quality.report import Tolerance
    from retold.runtime import Runtime

__all__ = ["EXIT_REGRESSED", "register"]

EXIT_REGRESSED = 3  # eval: a metric regressed beyond its tolerance, or a search leaked
_TENANT_PROBES = 3  # other tenants an evaluation asks each question in, at most


def _read_only(args: argparse.Namespace, tenant: str | None = None) -> Config:
    """The command's config with the store opened read-only (and in ``tenant`` when given);
    refused when the store does not exist."""
    config = cli_config(args)
    changes: dict[str, Any] = {"store": {"read_only": True}}
    if tenant is not None:
        changes["tenancy"] = {"tenant": tenant}
    config = config.replace(changes)
    if (missing := missing_store_of(config)) is not None:
        raise Refused(missing)
    return config


def _runtime(config: Config, *, models: bool, embedder: Any = None) -> Runtime:
    from retold.runtime import build_runtime

    return build_runtime(config, allow_embedding_mismatch=not models, embedder=embedder)


# -- golden --------------------------------------------------------------------------------


def _golden(args: argparse.Namespace) -> int:
    action = {"capture": _capture, "label": _label, "freeze": _freeze, "show": _show}[args.action]
    if args.action == "capture":
        if not args.out:
            raise Refused("golden capture needs --out FILE, the set to write", EXIT_USAGE)
    elif not args.file:
        raise Refused(f"golden {args.action} needs FILE, the golden set", EXIT_USAGE)
    return action(args)


def _capture(args: argparse.Namespace) -> int:
    from retold.quality.capture import capture
    from retold.quality.golden import write_golden

    out = Path(args.out)
    if out.exists():
        raise Refused(f"{out} exists; capture writes a new set (labels in the old one would be lost): choose"
                      " another name or remove it", EXIT_USAGE)
    scopes = list(dict.fromkeys(args.scope or []))
    with _runtime(_read_only(args), models=False) as rt:
        shown = ", ".join(map(str, scopes)) if scopes else "every scope"
        source = f"search_log of tenant {rt.tenant}: {shown}, size {args.size}, seed {args.seed}"
        result = capture(rt.store, size=args.size, seed=args.seed, now=rt.clock.now(), scopes=scopes,
                         source=source)
    if not result.golden.items:
        raise Refused(f"no logged search of {shown} to capture ({result.searches} searches in the log)")
    write_golden(out, result.golden)
    print(f"captured {len(result.golden.items)} items from {result.questions} distinct questions"
          f" ({result.searches} logged searches) in {len(result.strata)} strata into {out}")
    for stratum, count in result.strata.items():
        print(f"  {stratum}: {count}")
    return 0


def _label(args: argparse.Namespace) -> int:
    from retold.quality.golden import label, read_golden, write_golden

    if not args.item:
        raise Refused("golden label needs ITEM, the item id (golden show FILE --items lists them)",
                      EXIT_USAGE)
    if bool(args.expect) == bool(args.nothing):
        raise Refused("golden label needs --expect ID... or --nothing, not both", EXIT_USAGE)
    golden = read_golden(args.file)
    golden.refuse_if_frozen()
    item = golden.item(args.item)
    expected, added = _expected(args, golden, item)
    golden = label(golden, item.id, expected=expected, nothing_stored=args.nothing, answer=args.answer,
                   added=added)
    write_golden(args.file, golden)
    left = sum(not i.labelled for i in golden.items)
    what = (f"expects {', '.join(expected)}" if expected else "nothing stored answers it")
    print(f"labelled {item.id}: {what}{'' if args.answer is None else ', with an expected answer'};"
          f" {left} items left to label")
    return 0


def _expected(args: argparse.Namespace, golden: GoldenSet,
              item: GoldenItem) -> tuple[list[str], list[Snapshot]]:
    """The record ids ``--expect`` names: a candidate's id or a unique part of it; any
    other record is looked up in the store (it must exist and be readable by the item's
    principal) and kept as a snapshot beside the candidates."""
    from retold.cli.common import resolve_record_id
    from retold.policy.grants import readable_scopes
    from retold.quality.capture import snapshot

    ids: list[str] = []
    elsewhere: list[str] = []
    for text in args.expect or []:
        matches = [c.id for c in item.candidates if c.id == text or (len(text) >= 4 and (
            c.id.startswith(text) or c.id.endswith(text)))]
        if len(matches) > 1:
            raise Refused(f"{text} is ambiguous among item {item.id}'s candidates ({', '.join(matches)})",
                          EXIT_USAGE)
        (ids if matches else elsewhere).append(matches[0] if matches else text)
    added: list[Snapshot] = []
    if elsewhere:
        config = cli_config(args)
        if not args.store and missing_store_of(config) is not None:
            raise Refused(f"{', '.join(elsewhere)}: not among item {item.id}'s candidates; give --store to"
                          " name a record its search did not return", EXIT_USAGE)
        with _runtime(_read_only(args, golden.header.tenant), models=False) as rt:
            principal = item.principal.principal()
            readable = readable_scopes(rt.store, principal)
            for text in elsewhere:
                record = rt.store.get_record(resolve_record_id(rt.store, text))
                if record is None or record.status == "deleted":
                    raise Refused(f"no record {text} in tenant {rt.tenant}", EXIT_USAGE)
                if record.scope not in readable:
                    raise Refused(f"record {record.id} is in {record.scope}, which {principal.agent_id}/"
                                  f"{principal.user_id} cannot read: it cannot answer item {item.id}",
                                  EXIT_USAGE)
                added.append(snapshot(record, None))
                ids.append(record.id)
    return list(dict.fromkeys(ids)), added


def _freeze(args: argparse.Namespace) -> int:
    from retold.clock import SystemClock
    from retold.quality.golden import freeze, read_golden, write_golden

    golden = freeze(read_golden(args.file), SystemClock().now(), drop_unlabelled=args.drop_unlabelled)
    write_golden(args.file, golden)
    assert golden.header.frozen is not None
    print(f"froze {args.file}: {len(golden.items)} items, sha256 {golden.header.frozen.sha256}")
    return 0


def _show(args: argparse.Namespace) -> int:
    from retold.quality.golden import read_golden

    golden = read_golden(args.file)
    labelled = golden.labelled
    strata = dict(sorted(Counter(i.stratum for i in golden.items).items()))
    summary: dict[str, Any] = {
        "tenant": golden.header.tenant, "created_at": golden.header.created_at,
        "source": golden.header.source,
        "frozen": None if golden.header.frozen is None else golden.header.frozen.at,
        "sha256": golden.content_hash(), "items": len(golden.items), "labelled": len(labelled),
        "unlabelled": len(golden.items) - len(labelled),
        "answerable": sum(i.answerable for i in labelled),
        "nothing_stored": sum(i.nothing_stored for i in labelled),
        "strata": strata,
    }
    if args.json:
        summary["item_states"] = {i.id: _state(i) for i in golden.items} if args.items else None
        print(json.dumps(summary, indent=2, ensure_ascii=False))
        return 0
    frozen = f"frozen {summary['frozen']}" if summary["frozen"] else "not frozen"
    print(f"{args.file}: tenant {summary['tenant']}, {frozen}, sha256 {str(summary['sha256'])[:12]}")
    print(f"items {summary['items']}: labelled {summary['labelled']} ({summary['answerable']} answerable,"
          f" {summary['nothing_stored']} nothing stored), unlabelled {summary['unlabelled']}")
    for stratum, count in strata.items():
        print(f"  {stratum}: {count}")
    if args.items:
        for item in golden.items:
            print(f"{item.id}  {_state(item):<16} {item.scope}  {' / '.join(item.question)}")
    return 0


def _state(item: GoldenItem) -> str:
    if not item.labelled:
        return "unlabelled"
    return "nothing stored" if item.nothing_stored else f"expects {len(item.expected)}"


# -- eval ----------------------------------------------------------------------------------


def _tolerance(text: str) -> tuple[str, Tolerance]:
    from retold.quality.report import parse_tolerance

    try:
        return parse_tolerance(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _eval(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from retold.quality.audit import audit_summary
    from retold.quality.evaluation import Searcher, evaluate
    from retold.quality.golden import read_golden
    from retold.quality.report import DEFAULT_TOLERANCES, compare, latest_report, report_data, write_report
    from retold.store.location import list_tenants

    path = Path(args.golden)
    golden = read_golden(path)
    tenant = golden.header.tenant
    if args.tenant and args.tenant != tenant:
        raise Refused(f"{path} holds searches of tenant {tenant}, not {args.tenant}", EXIT_USAGE)
    if not golden.labelled:
        raise Refused(f"{path} has no labelled item to evaluate (retold golden label)", EXIT_USAGE)
    if golden.header.frozen is None:
        print(f"retold eval: {path} is not frozen; its report starts a series only this content continues",
              file=sys.stderr)
    tolerances = {**DEFAULT_TOLERANCES, **dict(args.tolerance or [])}
    config = _read_only(args, tenant)
    with ExitStack() as stack:
        rt = stack.enter_context(_runtime(config, models=True))
        others: dict[str, Searcher] = {}
        for other in [t for t in list_tenants(config.store.target) if t != tenant][:_TENANT_PROBES]:
            probe = stack.enter_context(_runtime(config.replace({"tenancy": {"tenant": other}}), models=True,
                                                 embedder=rt.embedder))
            others[other] = Searcher(probe.store, _search(probe))
        evaluation = evaluate(golden, Searcher(rt.store, _search(rt)), k=args.k, other_tenants=others)
        settings = _settings(rt)
        now = rt.clock.now()
        audit = audit_summary(rt.store, tenant, now=now)
        answers = _answers(rt, golden, evaluation, args) if args.answer else None
    directory = Path(args.report_dir) if args.report_dir else path.with_name(f"{path.stem}.reports")
    previous = latest_report(directory, evaluation.set_sha256, evaluation.k)
    regressions = compare(evaluation, previous[1] if previous else None, tolerances)
    data = report_data(evaluation, at=now, set_name=path.name, settings=settings, tolerances=tolerances,
                       previous=previous[1] if previous else None,
                       previous_name=previous[0] if previous else None, regressions=regressions,
                       accepted=args.accept)
    data["audit"] = asdict(audit)
    if answers is not None:
        data["answers"] = asdict(answers)
    written = write_report(directory, data, args.report_name)
    o = evaluation.overall
    print(f"evaluated {o.items} items of {path.name} (sha256 {evaluation.set_sha256[:12]}) in"
          f" {evaluation.seconds:.1f} s: recall@{args.k} {_g(o.recall_at_k)}, empty {_g(o.empty_rate)},"
          f" abstention {_g(o.abstention)}, stale {_g(o.stale_rate)},"
          f" contradictions {_g(o.contradiction_rate)},"
          f" open conflicts/1K {_g(o.open_conflicts_per_1k)}, leaks {o.leaks},"
          f" tokens/search {_g(o.tokens_per_search)}, p50 {_g(o.search_p50_ms)} ms")
    if answers is not None:
        print(answers.summary())
    print(f"report: {written} and {written.with_suffix('.md').name}")
    print(f"compared with {previous[0]}" if previous else "no previous report of this set to compare with")
    for regression in regressions:
        print(f"retold eval: {regression.line()}", file=sys.stderr)
    if data["baseline"] and regressions:
        print("accepted: later runs compare with this report")
        return 0
    return EXIT_REGRESSED if regressions else 0


def _answers(rt: Runtime, golden: GoldenSet, evaluation: Any, args: argparse.Namespace) -> AnswerReport:
    """Each labelled item that says what its answer is (an answer text, or nothing stored)
    answered from the records its search returned, and graded. The memories go to the
    hosted model masked, as every text the tenant's pack masks does."""
    from retold.quality.answering import AnswerItem, grade_answers

    results = {r.id: r for r in evaluation.items}
    items = []
    for item in golden.labelled:
        result = results.get(item.id)
        if result is None or (item.answer is None and not item.nothing_stored):
            continue  # no expected answer to grade against
        records = {r.id: r for r in rt.store.records(result.returned)}
        memories = tuple(records[i].redacted_content or records[i].content
                         for i in result.returned if i in records)
        items.append(AnswerItem(" ".join(item.question), memories,
                                None if item.nothing_stored else item.answer, item.id))
    ingestion = rt.config.ingestion
    answer_model = args.answer_model or ingestion.extraction_model
    judge_model = args.judge_model or ingestion.review_model
    return grade_answers(items, rt.hosted_client(answer_model), rt.hosted_client(judge_model),
                         prices=dict(args.price or []))


def _price(text: str) -> tuple[str, TokenPrice]:
    """``MODEL=IN,OUT``: US dollars per million input and output tokens."""
    from retold.quality.answering import TokenPrice

    model, _, cost = text.partition("=")
    wrong = argparse.ArgumentTypeError(f"{text!r}: give MODEL=IN,OUT in dollars per million tokens")
    try:
        per_in, per_out = (float(v) for v in cost.split(","))
    except ValueError:
        raise wrong from None
    if not model or per_in < 0 or per_out < 0:
        raise wrong
    return model, TokenPrice(per_in, per_out)


def _search(rt: Runtime) -> Any:
    """The runtime's search path as the evaluation calls it."""
    return lambda principal, request: rt.retriever.search(principal, request).response


def _settings(rt: Runtime) -> dict[str, str]:
    """What the report records of the configuration the searches ran under: the model, the
    backend, and a digest of every setting but where the store is (a changed threshold shows
    as a new digest)."""
    from retold.ingest.attempts import stable_digest

    plain = config_to_dict(rt.config)
    plain.pop("store", None)
    return {"embedding": f"{rt.embedder.name}@{rt.embedder.version}", "backend": rt.store.backend,
            "config_digest": stable_digest(plain)}


def _g(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def register(commands: Any) -> None:
    """Add ``golden`` and ``eval``."""
    golden = add_command(
        commands, "golden", _golden, "capture, label, freeze and show a golden set",
        "A golden set is questions this deployment's agents asked, with the records that answer"
        " each. 'capture --out FILE' samples logged searches and the records they returned,"
        " stratified by scope, record type and empty vs answered (the same log and --seed give the"
        " same set; the store is only read); 'label FILE ITEM --expect ID... | --nothing"
        " [--answer TEXT]' labels one item; 'freeze FILE' records the hash of its items, after which"
        " it takes no label and a changed file is refused; 'show FILE' counts what is labelled.")
    golden.add_argument("action", choices=["capture", "label", "freeze", "show"], help="what to do")
    golden.add_argument("file", nargs="?", metavar="FILE", help="the golden set (label, freeze, show)")
    golden.add_argument("item", nargs="?", metavar="ITEM", help="the item id, e.g. q0003 (label)")
    golden.add_argument("--out", help="where capture writes the new set (capture)")
    golden.add_argument("--scope", action="append", type=scope_arg,
                        help="only searches about this scope, kind:id; repeatable (capture)")
    golden.add_argument("--size", type=positive, default=200, help="items to sample (capture; default 200)")
    golden.add_argument("--seed", type=int, default=0, help="the sampling seed (capture; default 0)")
    golden.add_argument("--expect", nargs="+", metavar="ID",
                        help="the records that answer the item: candidate ids or unique parts; another"
                        " record needs --store (label)")
    golden.add_argument("--nothing", action="store_true", help="nothing stored answers the item (label)")
    golden.add_argument("--answer", help="the expected answer text (label, optional)")
    golden.add_argument("--drop-unlabelled", action="store_true",
                        help="freeze without the items not labelled yet (freeze)")
    golden.add_argument("--items", action="store_true", help="list every item with its state (show)")
    golden.add_argument("--json", action="store_true", help="print the counts as JSON (show)")

    ev = add_command(
        commands, "eval", _eval, "run a golden set against a store and compare with the last run",
        "Ask every labelled item of GOLDEN again through the store's own search path, as the item's"
        " principal, on the store opened read-only (no search-log row is written), and report per"
        " scope and overall: recall@k, empty rate on answerable items, abstention on 'nothing"
        " stored' items, stale and contradiction rates, open conflicts per 1,000 records, leaks"
        " (scope and tenant probes; must be 0), tokens per search and search p50. Writes a dated"
        " JSON and Markdown report, compares it with the last passing report of the same set and"
        " exits 3 when a metric regressed beyond its tolerance or anything leaked, naming the metric"
        " and the items; a run that regressed is no baseline unless --accept says so.")
    ev.add_argument("golden", metavar="GOLDEN", help="the golden set file")
    ev.add_argument("--k", type=positive, default=10, help="results per search (default 10)")
    ev.add_argument("--report-dir", help="where reports go and the previous one is found (default:"
                    " GOLDEN's name with .reports beside it)")
    ev.add_argument("--report-name", help="write NAME.json and NAME.md instead of a dated name")
    ev.add_argument("--accept", action="store_true",
                    help="make this run the baseline later runs compare with even if a metric regressed"
                    " (a deliberate change; exit 0). A run that leaked is never accepted")
    ev.add_argument("--answer", action="store_true",
                    help="also answer each item that has an expected answer (or nothing stored) from the"
                    " records its search returned, with a hosted model, and grade the answer with a judge"
                    " prompt; without a configured provider it says so in one line and skips")
    ev.add_argument("--answer-model", help="the model that answers (default: ingestion.extraction_model)")
    ev.add_argument("--judge-model", help="the model that grades (default: ingestion.review_model)")
    ev.add_argument("--price", action="append", type=_price, metavar="MODEL=IN,OUT",
                    help="a model's price in US dollars per million input and output tokens, for the"
                    " cost line; repeatable")
    ev.add_argument("--tolerance", action="append", type=_tolerance, metavar="METRIC=VALUE[%]",
                    help="how far METRIC may move the wrong way: absolute (recall_at_k=0.05) or"
                    " relative (search_p50_ms=50%%); repeatable")
