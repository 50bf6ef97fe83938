"""An evaluation's dated report (JSON and Markdown) and its comparison with the last one.

A report is named by the set it ran (the first 12 hex digits of its content hash) and the
moment it ran: ``eval-<sha12>-<UTC time>.json`` and ``.md`` in a report folder. The
previous report is the latest baseline in the same folder of the same set (the full hash)
and the same ``k``: a run that regressed is reported but is no baseline, so running a
failing build again fails again, until a person accepts the new figures (``--accept``) or
the cause is fixed. A set whose items changed is a new set and starts a new series.
Comparing the two gives the regressions: a metric that moved the wrong way by more than
its tolerance, overall or in one scope, with the items that moved with it. Leaks are never
tolerated: any leak is a regression, whatever the previous report says, and no run that
leaked becomes a baseline.

Tolerances are absolute (``0.02`` is two points of a rate) or relative (``10%``); a timing
also has to move by more than :data:`TIMING_FLOOR_MS`, so one slow run on a busy machine
does not fail a build on a set whose searches take a few milliseconds, and it is compared
over the whole set only: a scope's median of a handful of searches is noise.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from retold.clock import to_iso
from retold.errors import GoldenSetError
from retold.quality.evaluation import METRICS, Evaluation, ItemResult, Metrics

__all__ = [
    "DEFAULT_TOLERANCES", "REPORT_FORMAT", "TIMING_FLOOR_MS", "Regression", "Tolerance", "compare",
    "latest_report", "parse_tolerance", "render_markdown", "report_data", "write_report",
]

REPORT_FORMAT = "retold-eval-report"
TIMING_FLOOR_MS = 5.0
# Which way is better for each metric.
_HIGHER_IS_BETTER = frozenset({"recall_at_k", "abstention"})
_NAMED_ITEMS = 10  # items a regression line names


@dataclass(frozen=True)
class Tolerance:
    """How far a metric may move the wrong way before it is a regression."""

    amount: float
    relative: bool = False

    def allows(self, before: float, after: float) -> bool:
        worse = abs(after - before)
        limit = self.amount * abs(before) if self.relative else self.amount
        return worse <= limit + 1e-9

    def __str__(self) -> str:
        return f"{self.amount * 100:g}%" if self.relative else f"{self.amount:g}"


DEFAULT_TOLERANCES: Mapping[str, Tolerance] = {
    "recall_at_k": Tolerance(0.02),
    "empty_rate": Tolerance(0.02),
    "abstention": Tolerance(0.05),
    "stale_rate": Tolerance(0.01),
    "contradiction_rate": Tolerance(0.01),
    "open_conflicts_per_1k": Tolerance(1.0),
    "leaks": Tolerance(0.0),
    "tokens_per_search": Tolerance(0.10, relative=True),
    "search_p50_ms": Tolerance(1.0, relative=True),
}

_TOLERANCE = re.compile(r"([a-z_0-9]+)=([0-9]*\.?[0-9]+)(%?)")


def parse_tolerance(text: str) -> tuple[str, Tolerance]:
    """``METRIC=VALUE`` or ``METRIC=VALUE%``; a ValueError naming the problem otherwise."""
    found = _TOLERANCE.fullmatch(text.strip())
    if found is None:
        raise ValueError(f"expected METRIC=VALUE or METRIC=VALUE%, got {text!r}")
    metric, value, percent = found.groups()
    if metric not in METRICS:
        raise ValueError(f"no metric {metric!r}; one of {', '.join(METRICS)}")
    if metric == "leaks":
        raise ValueError("leaks take no tolerance: any leak fails the run")
    amount = float(value)
    return metric, Tolerance(amount / 100 if percent else amount, relative=bool(percent))


@dataclass(frozen=True)
class Regression:
    """One metric that moved the wrong way beyond its tolerance."""

    metric: str
    scope: str  # "overall" or a scope
    before: float | None
    after: float | None
    tolerance: str
    items: list[str]

    def line(self) -> str:
        named = (f"; items {', '.join(self.items[:_NAMED_ITEMS])}"
                 + (f" and {len(self.items) - _NAMED_ITEMS} more" if len(self.items) > _NAMED_ITEMS else "")
                 if self.items else "")
        if self.metric == "leaks":
            return f"leaks {self.scope}: {_shown(self.after)} (must be 0){named}"
        return (f"{self.metric} regressed {self.scope}: {_shown(self.before)} -> {_shown(self.after)}"
                f" (tolerance {self.tolerance}){named}")


def _shown(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


# -- the report ----------------------------------------------------------------------------


def report_data(evaluation: Evaluation, *, at: datetime, set_name: str, settings: Mapping[str, str],
                tolerances: Mapping[str, Tolerance], previous: Mapping[str, Any] | None,
                previous_name: str | None, regressions: Sequence[Regression],
                accepted: bool = False) -> dict[str, Any]:
    """The JSON report: the run, its metrics per scope and overall, every item's result,
    what it was compared with, and whether later runs compare with it (``baseline``: it
    passed, or a person accepted its regressions; never when something leaked)."""
    baseline = not evaluation.overall.leaks and (accepted or not regressions)
    return {
        "format": REPORT_FORMAT, "version": 1, "at": to_iso(at),
        "set": {"name": set_name, "sha256": evaluation.set_sha256, "frozen": evaluation.frozen,
                "tenant": evaluation.tenant, "items": len(evaluation.items),
                "unlabelled": evaluation.unlabelled},
        "k": evaluation.k, "settings": dict(settings),
        "overall": asdict(evaluation.overall),
        "scopes": {scope: asdict(m) for scope, m in evaluation.scopes.items()},
        "probes": {"scope": evaluation.scope_probes, "tenants": evaluation.tenants_probed},
        "seconds": round(evaluation.seconds, 3),
        "tolerances": {name: str(t) for name, t in tolerances.items()},
        "compared_with": None if previous is None else {"report": previous_name, "at": previous.get("at")},
        "regressions": [asdict(r) for r in regressions], "accepted": accepted and bool(regressions),
        "baseline": baseline,
        "items": [_item_data(r) for r in evaluation.items],
    }


def _item_data(result: ItemResult) -> dict[str, Any]:
    data = asdict(result)
    data["ms"] = round(result.ms, 3)
    return data


def write_report(directory: Path, data: Mapping[str, Any], name: str | None = None) -> Path:
    """Write ``data`` as JSON and Markdown into ``directory``, named by its set and time
    unless ``name`` is given; the JSON file's path."""
    directory.mkdir(parents=True, exist_ok=True)
    if name is None:
        stamp = str(data["at"]).replace("-", "").replace(":", "").replace(".", "")
        name = f"eval-{str(data['set']['sha256'])[:12]}-{stamp}"
    target = directory / f"{name}.json"
    target.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    target.with_suffix(".md").write_text(render_markdown(data), encoding="utf-8")
    return target


def latest_report(directory: Path, sha256: str, k: int) -> tuple[str, dict[str, Any]] | None:
    """The latest baseline report in ``directory`` of the set with this hash and this
    ``k`` (file name, data), or None."""
    if not directory.is_dir():
        return None
    found: list[tuple[str, str, dict[str, Any]]] = []
    for path in directory.glob("*.json"):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if (isinstance(data, dict) and data.get("format") == REPORT_FORMAT
                and isinstance(data.get("set"), dict) and data["set"].get("sha256") == sha256
                and data.get("k") == k and data.get("baseline") is True):
            found.append((str(data.get("at", "")), path.name, data))
    if not found:
        return None
    _, name, data = max(found, key=lambda entry: (entry[0], entry[1]))
    return name, data


# -- comparison ----------------------------------------------------------------------------


def compare(evaluation: Evaluation, previous: Mapping[str, Any] | None,
            tolerances: Mapping[str, Tolerance]) -> list[Regression]:
    """The regressions of ``evaluation`` against the previous report's data: each metric
    that got worse beyond its tolerance, overall and per scope (a scope both runs had),
    and every leak, whether or not there is a previous report."""
    found: list[Regression] = []
    items = {r.id: r for r in evaluation.items}
    if evaluation.overall.leaks:
        found.append(Regression("leaks", "overall", None, float(evaluation.overall.leaks), "0",
                                [r.id for r in evaluation.items if r.leaks]))
    if previous is None:
        return found
    try:
        before_items = {str(d["id"]): d for d in previous.get("items", [])}
        groups: list[tuple[str, Metrics, Mapping[str, Any]]] = [
            ("overall", evaluation.overall, previous["overall"])]
        groups += [(scope, metrics, previous["scopes"][scope]) for scope, metrics in evaluation.scopes.items()
                   if scope in previous.get("scopes", {})]
    except (KeyError, TypeError, AttributeError) as exc:
        raise GoldenSetError(f"the previous report cannot be compared with: it lacks {exc}") from None
    for scope, metrics, before in groups:
        for metric in METRICS:
            if metric == "leaks" or (metric == "search_p50_ms" and scope != "overall"):
                continue
            old, new = before.get(metric), metrics.value(metric)
            if old is None or new is None:
                continue
            tolerance = tolerances.get(metric, DEFAULT_TOLERANCES[metric])
            if not _worse(metric, float(old), new, tolerance):
                continue
            in_scope = [r for r in items.values() if scope == "overall" or r.scope == scope]
            found.append(Regression(metric, scope, float(old), new, str(tolerance),
                                    _moved(metric, in_scope, before_items)))
    return found


def _worse(metric: str, before: float, after: float, tolerance: Tolerance) -> bool:
    moved_wrong = after < before if metric in _HIGHER_IS_BETTER else after > before
    if not moved_wrong or tolerance.allows(before, after):
        return False
    return not (metric == "search_p50_ms" and after - before <= TIMING_FLOOR_MS)


def _moved(metric: str, results: Sequence[ItemResult], before: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The items that moved the way ``metric`` did, the furthest first."""
    moved: list[tuple[float, str]] = []
    for result in results:
        old = before.get(result.id)
        if old is not None and (amount := _item_moved(metric, result, old)) > 0:
            moved.append((amount, result.id))
    return [item for _, item in sorted(moved, key=lambda entry: (-entry[0], entry[1]))]


def _item_moved(metric: str, result: ItemResult, old: Mapping[str, Any]) -> float:
    """How far one item moved the way ``metric`` got worse (0 when it did not)."""
    if metric == "recall_at_k":
        if result.recall is None or old.get("recall") is None:
            return 0.0
        return float(old["recall"]) - result.recall
    if metric == "tokens_per_search":
        return float(result.tokens - int(old.get("tokens", 0)))
    if metric == "search_p50_ms":
        slower = result.ms - float(old.get("ms", 0.0))
        return slower if slower > TIMING_FLOOR_MS else 0.0
    became = {
        "empty_rate": result.kind == "answerable" and result.empty and not old.get("empty"),
        "abstention": result.kind == "nothing_stored" and not result.empty and bool(old.get("empty")),
        "stale_rate": bool(result.stale) and not old.get("stale"),
        "contradiction_rate": bool(result.contradictions) and not old.get("contradictions"),
    }
    return float(became.get(metric, False))


# -- Markdown ------------------------------------------------------------------------------

_COLUMNS = [("recall_at_k", "recall@k"), ("empty_rate", "empty (answerable)"), ("abstention", "abstention"),
            ("stale_rate", "stale"), ("contradiction_rate", "contradictions"),
            ("open_conflicts_per_1k", "open conflicts /1K"), ("leaks", "leaks"),
            ("tokens_per_search", "tokens/search"), ("search_p50_ms", "p50 ms")]


def render_markdown(data: Mapping[str, Any]) -> str:
    """The report as a short Markdown page: the table, the regressions, the items to look at."""
    info = data["set"]
    lines = [f"# Golden-set evaluation: {info['name']}", "",
             f"Run {data['at']} on tenant {info['tenant']}, k = {data['k']}: {info['items']} labelled items"
             f" ({info['unlabelled']} unlabelled skipped), set sha256 {str(info['sha256'])[:12]}"
             f"{'' if info['frozen'] else ' (not frozen)'}; {data['probes']['scope']} scope probes,"
             f" tenants probed: {', '.join(data['probes']['tenants']) or 'none'}; {data['seconds']} s.", ""]
    if data.get("settings"):
        lines += [", ".join(f"{key}: {value}" for key, value in data["settings"].items()), ""]
    header = ["scope", "items", *(label for _, label in _COLUMNS)]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    rows = [("overall", data["overall"]), *sorted(data["scopes"].items())]
    for name, metrics in rows:
        cells = [str(metrics["items"])] + [_cell(metrics.get(key)) for key, _ in _COLUMNS]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines.append("")
    compared = data.get("compared_with")
    if compared is None:
        lines.append("No previous report of this set to compare with.")
    else:
        lines.append(f"Compared with {compared['report']} ({compared['at']}).")
    regressions = data.get("regressions") or []
    if regressions:
        lines += ["", "## Regressions", ""]
        lines += [f"- {Regression(**r).line()}" for r in regressions]
        lines.append("")
        lines.append("Accepted as the new baseline." if data.get("accepted")
                     else "Not a baseline: the next run compares with the same previous report.")
    elif compared is not None:
        lines.append("No metric regressed beyond its tolerance.")
    lines += _audit_lines(data.get("audit")) + _answer_lines(data.get("answers"))
    problems = [i for i in data["items"] if i["missing"] or i["stale"] or i["contradictions"] or i["leaks"]
                or (i["kind"] == "nothing_stored" and not i["empty"])]
    if problems:
        lines += ["", "## Items to look at", ""]
        for item in problems[:30]:
            notes = []
            if item["missing"]:
                notes.append(f"missing {', '.join(item['missing'])}")
            if item["kind"] == "nothing_stored" and not item["empty"]:
                notes.append(f"answered {len(item['returned'])} records where nothing is stored")
            if item["stale"]:
                notes.append(f"stale {', '.join(item['stale'])}")
            if item["contradictions"]:
                notes.append(f"{len(item['contradictions'])} conflicting pairs")
            if item["leaks"]:
                notes.append(f"{len(item['leaks'])} leaks")
            lines.append(f"- {item['id']} ({item['scope']}): {'; '.join(notes)}")
        if len(problems) > 30:
            lines.append(f"- and {len(problems) - 30} more (the JSON report lists every item)")
    return "\n".join(lines) + "\n"


def _audit_lines(audit: Mapping[str, Any] | None) -> list[str]:
    """The weekly extraction audit's rates beside the set's metrics: what people said of the
    records extraction wrote, which no golden set measures."""
    if not audit:
        return []
    age = audit.get("queue_age_seconds")
    waiting = f"{audit['open']} waiting" + ("" if age is None else f", the oldest {age / 86400:.1f} days")
    return ["", "## Extraction audit", "",
            f"Over the last {audit['window_days']} days, {audit['answered']} sampled records answered:"
            f" true {_cell(audit.get('true_rate'))}, atomic {_cell(audit.get('atomic_rate'))},"
            f" worth keeping {_cell(audit.get('keep_rate'))}; {waiting}."]


def _answer_lines(answers: Mapping[str, Any] | None) -> list[str]:
    if not answers:
        return []
    if answers["status"] == "skipped":
        return ["", "## Answer accuracy", "", f"Skipped: {answers['reason']}."]
    tokens = [answers["answer_tokens"], answers["judge_tokens"]]
    spent = sum(t["input_tokens"] for t in tokens), sum(t["output_tokens"] for t in tokens)
    cost = "" if answers.get("cost_usd") is None else f", ${answers['cost_usd']:.4f}"
    return ["", "## Answer accuracy", "",
            f"{_cell(answers.get('accuracy'))} ({answers['correct']}/{answers['graded']} correct,"
            f" {answers['failed']} failed): answered by {answers['answer_model']}"
            f" ({answers['answer_prompt']}), judged by {answers['judge_model']} ({answers['judge_prompt']});"
            f" {spent[0]} tokens in, {spent[1]} out{cost}."]


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    return f"{value:g}" if isinstance(value, float) else str(value)
