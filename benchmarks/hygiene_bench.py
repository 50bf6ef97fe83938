"""Hygiene benchmark: does ``retold hygiene`` find repeated facts without merging distinct ones?

The conversational set (``benchmarks/data/conversations.json``, twelve users' memories,
real all-MiniLM-L6-v2 vectors) is loaded as each user's scope: a record superseded later
in the set is stored superseded, every other one live, each about its entity. Into each
scope the benchmark plants, from a seeded choice of live records, labelled rows:

- ``same_words``: a record restated with other case, spacing and punctuation;
- ``reworded``: a record restated with filler around it ("Remember that ...", "... (noted
  again)"), the form a model's repeated extraction takes;
- ``said``: the speaker's own words attached to the record's subject (``<name> said: <the
  quote>``), a paraphrase that shares the meaning but few words;
- ``other_value`` (distinct, must not merge): a semantic record restated with the value of
  another subject's record of the same attribute ("Sanjay is allergic to gluten" beside
  "Sanjay is allergic to kiwi fruit").

Planted duplicates are the first three groups; the target (issue "Memory people can undo,
keep, cap, move and clean") asks that every planted duplicate be found and no distinct
fact merged. For each ``lifecycle.duplicate_cosine`` in a sweep it reports, per group, the
duplicates found (in one cluster with their source), and the distinct pairs merged: two
records in one cluster that are not a labelled duplicate pair (two facts of the set, or a
planted other value with its source). The set's own episodes about one person (same
template, another day) are the natural hard negatives.

Run: ``.venv/bin/python -m benchmarks.hygiene_bench``. Writes
benchmarks/results/hygiene.json and hygiene.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import re
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

from benchmarks.report import machine, pin_threads, write_report

pin_threads()

from retold import build_runtime, load_config  # noqa: E402
from retold.clock import from_iso, new_id  # noqa: E402
from retold.ingest.subject import subject_of  # noqa: E402
from retold.models import Scope  # noqa: E402
from retold.names import normalize_alias  # noqa: E402
from retold.policy.hygiene import duplicate_clusters, normalised_text  # noqa: E402
from retold.store import Embedding  # noqa: E402
from retold.testing import make_record  # noqa: E402

DATA = Path(__file__).resolve().parent / "data" / "conversations.json"
THRESHOLDS = (0.75, 0.8, 0.85, 0.88, 0.9, 0.92, 0.94, 0.95, 0.96, 0.97, 0.98)
DUPLICATE_GROUPS = ("same_words", "reworded", "said")
PER_SCOPE = 4  # sources chosen per group and scope
_FILLERS = (("Remember that ", ""), ("", " (noted again)"), ("As mentioned before, ", ""), ("Note: ", ""))


def _restated(text: str, r: random.Random) -> str:
    words = text.rstrip(".!").split()
    return (" ".join(w.lower() if r.random() < 0.7 else w.upper() for w in words)
            + r.choice(["", "!", " .", "..."])).replace(", ", " , ")


def _reworded(text: str, r: random.Random) -> str:
    before, after = r.choice(_FILLERS)
    return f"{before}{text.rstrip('.') if after else text}{after}"


def load(rt: Any, conv: dict[str, Any], r: random.Random) -> dict[str, Any]:
    """Write one conversation's records and its planted rows; return the labels."""
    scope = Scope("user", conv["user"])
    store, embedder = rt.store, rt.embedder
    entities: dict[tuple[str, str], str] = {}
    for rec in conv["records"]:
        kind, name = rec["about"]
        if (kind, name) not in entities:
            entity = store.create_entity(kind, name, scope, status="confirmed")
            store.add_alias(entity.id, normalize_alias(name))
            entities[(kind, name)] = entity.id
    latest = {}
    for rec in conv["records"]:
        if rec["attribute"]:
            latest[(tuple(rec["about"]), rec["attribute"])] = rec["key"]
    rows = []
    for rec in conv["records"]:
        live = not rec["attribute"] or latest[(tuple(rec["about"]), rec["attribute"])] == rec["key"]
        rows.append((rec["key"], rec, "confirmed" if live else "superseded"))
    live_rows = [(key, rec) for key, rec, status in rows if status == "confirmed"]
    planted: list[tuple[str, str, dict[str, Any], str]] = []  # (group, source key, rec, content)
    for group in DUPLICATE_GROUPS:
        for key, rec in r.sample(live_rows, PER_SCOPE):
            if group == "same_words":
                text = _restated(rec["content"], r)
            elif group == "reworded":
                text = _reworded(rec["content"], r)
            else:
                text = f"{rec['about'][1]} said: {rec['evidence']}"
            planted.append((group, key, rec, text))
    by_attribute: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for _, rec in live_rows:
        if rec["attribute"]:
            by_attribute[rec["attribute"]].append(rec)
    swaps = []
    for recs in by_attribute.values():
        for a in recs:
            for b in recs:
                text = re.sub(re.escape(b["about"][1]), a["about"][1], b["content"])
                # Two subjects with one value (both on Mountain Time) would plant a duplicate.
                if a["about"] != b["about"] and normalised_text(text) != normalised_text(a["content"]):
                    swaps.append((a, text))
    for a, text in r.sample(swaps, min(PER_SCOPE * 2, len(swaps))):
        planted.append(("other_value", a["key"], a, text))
    texts = [rec["content"] for _, rec, _ in rows] + [text for *_, text in planted]
    vectors = embedder.embed_documents(texts)
    ids: dict[str, str] = {}
    labels: dict[str, tuple[str, str]] = {}  # planted id -> (group, source id)
    everything = rows + [(f"p{i}", p[2], "confirmed") for i, p in enumerate(planted)]
    with store.atomic():
        for n, (key, rec, status) in enumerate(everything):
            entity = entities[tuple(rec["about"])]
            attribute = rec["attribute"] if n < len(rows) else (f"{rec['attribute']}_restated"
                                                                 if rec["attribute"] else None)
            at = from_iso(rec["date"] + "T12:00:00+00:00")
            record = make_record(id=new_id(), type=rec["type"], content=texts[n], scope=scope,
                                 subject=subject_of(entity, attribute), subject_entity_id=entity,
                                 attribute=attribute, source_kind="user_statement", evidence=rec["evidence"],
                                 created_at=at, event_at=at, status=status)
            store.write_record(record, links=[(entity, "about")],
                               embedding=Embedding(embedder.name, embedder.version, vectors[n]))
            ids[key] = record.id
            if n >= len(rows):
                group, source, _, _ = planted[n - len(rows)]
                labels[record.id] = (group, ids[source])
    return {"scope": scope, "labels": labels}


def measure(rt: Any, scopes: list[dict[str, Any]], threshold: float) -> dict[str, Any]:
    found = {g: 0 for g in DUPLICATE_GROUPS}
    planted = {g: 0 for g in (*DUPLICATE_GROUPS, "other_value")}
    merged_distinct = {"set_facts": 0, "other_value": 0, "wrong_source": 0}
    now = rt.clock.now()
    ranks = dataclasses.asdict(rt.config.policy.source_rank)
    family = rt.store.embedding_family()
    for entry in scopes:
        scope, labels = entry["scope"], entry["labels"]
        rows = rt.store.capacity_rows(scope, {})
        clusters = duplicate_clusters(rows, rt.store.live_texts(scope), rt.store.live_vectors(scope, family),
                                      set(), threshold, now, ranks)
        cluster_of = {rid: n for n, c in enumerate(clusters) for rid in (c.keep, *c.merge)}
        for rid, (group, source) in labels.items():
            planted[group] += 1
            together = rid in cluster_of and cluster_of.get(source) == cluster_of[rid]
            if group == "other_value":
                merged_distinct["other_value"] += together
            else:
                found[group] += together
        for c in clusters:
            members = [c.keep, *c.merge]
            originals = [m for m in members if m not in labels]
            merged_distinct["set_facts"] += max(0, len(originals) - 1)
            for m in members:
                if m in labels and labels[m][0] != "other_value" and labels[m][1] not in members:
                    merged_distinct["wrong_source"] += 1
    return {"threshold": threshold, "planted": planted, "found": found, "merged_distinct": merged_distinct}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    data = json.loads(DATA.read_text())["conversations"]
    r = random.Random(args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        config = load_config(overrides={"store": {"path": str(Path(tmp) / "hygiene.sqlite")},
                                        "embedding": {"torch_threads": 1}})
        with build_runtime(config) as rt:
            scopes = [load(rt, conv, r) for conv in data]
            results = [measure(rt, scopes, t) for t in THRESHOLDS]
            model = rt.embedder.name
            default = rt.config.lifecycle.duplicate_cosine
    for row in results:
        print(row, flush=True)
    planted = results[0]["planted"]
    table = [["cosine", *(f"{g} found (of {planted[g]})" for g in DUPLICATE_GROUPS),
              f"other value merged (of {planted['other_value']})", "set facts merged", "wrong source"]]
    for row in results:
        mark = " (default)" if row["threshold"] == default else ""
        table.append([f"{row['threshold']}{mark}", *(str(row["found"][g]) for g in DUPLICATE_GROUPS),
                      str(row["merged_distinct"]["other_value"]), str(row["merged_distinct"]["set_facts"]),
                      str(row["merged_distinct"]["wrong_source"])])
    write_report("hygiene", {"machine": machine(), "model": model, "seed": args.seed, "results": results},
                 table, notes=f"{len(data)} scopes of the conversational set, {model}. Found: a planted "
                              "duplicate in one cluster with its source. Merged: records in one cluster that "
                              "are not a labelled duplicate pair (set facts: two of the set's own records; "
                              "wrong source: a planted duplicate clustered without its source).")


if __name__ == "__main__":
    main()
