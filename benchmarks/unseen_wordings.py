"""Builds benchmarks/data/unseen_wordings.json: the conversational set's facts, asked anew.

The conversational set's two halves share their question templates, so a floor tuned on
half A meets the same wordings on half B with other names and values. That checks values,
not phrasing. These questions ask about the same records (nothing is added to the store)
in wordings written after the gate was tuned and kept out of every sweep: other verbs,
other attribute words, other unknown names and other unstored attributes. They are what a
new user's phrasing looks like to floors that never saw it.

Every question is built from a record's attribute and content (the content templates of
``benchmarks.conversations`` are parsed back into their values), with a generator seeded
per conversation, so ``python -m benchmarks.unseen_wordings`` rewrites the file byte for
byte. The layout is that of ``conversations.json``'s questions, one list per conversation
in the same order; keys read ``cNNuMMM``.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable
from typing import Any

from benchmarks.conversations import OUT as CONVERSATIONS

OUT = CONVERSATIONS.parent / "unseen_wordings.json"
EPISODES_ASKED = 0.3  # share of the dated events that get questions

UNKNOWN_PEOPLE = ["Anselm", "Briony", "Corwin", "Dagny", "Eustace", "Fenella", "Gulliver",
                  "Honora", "Isidore", "Jessamy", "Kasimir", "Lavinia", "Mordecai", "Nerys",
                  "Oswin", "Perpetua", "Quinlan", "Rowena", "Severin", "Tamsin", "Ulric",
                  "Verity", "Wilhelmina", "Zebedee"]
UNKNOWN_ORGS = ["Larkspur Dynamics", "Lanternfish Surveys", "Quillfeather Press",
                "Coralline Bakeries", "Northstar Kites", "Amberfield Orchards", "Bramble Textiles",
                "Cinder Rock Mining", "Driftwood Hostels", "Foxglove Stationers",
                "Gullwing Airways", "Heron Point Marinas"]
UNKNOWN_PROJECTS = ["Albatross", "Bramble", "Citadel", "Dynamo", "Equinox", "Firefly",
                    "Glacier", "Hyperion", "Ironwood", "Keystone", "Kraken", "Lodestar"]
UNSTORED_PERSON = ["What is {S}'s favourite colour?", "Which political party does {S} vote for?",
                   "What is {S}'s star sign?", "What is {S}'s phone number?",
                   "Which gym does {S} go to?", "What is {S}'s email address?"]
UNSTORED_ORG = ["Who is {O}'s chief executive?", "What industry is {O} in?",
                "What is {O}'s website address?", "Which bank does {O} use?"]
UNSTORED_PROJECT = ["Which programming language is {P} written in?",
                    "What is the repository URL for {P}?", "Who are {P}'s customers?"]

# Each record template of benchmarks.conversations, parsed back into its values.
_FACTS: dict[str, re.Pattern[str]] = {
    "allergy": re.compile(r"(?P<s>.+) is allergic to (?P<food>.+)\.$"),
    "job": re.compile(r"(?P<s>.+) works as an? (?P<role>.+?)(?: at (?P<employer>.+))?\.$"),
    "hometown": re.compile(r"(?P<s>.+) grew up in (?P<city>.+)\.$"),
    "instrument": re.compile(r"(?P<s>.+) plays the (?P<instrument>.+) in an? (?P<group>.+)\.$"),
    "timezone": re.compile(r"(?P<s>.+)'s timezone is (?P<tz>.+) Time\.$"),
    "favourite_book": re.compile(r"(?P<s>.+)'s favourite novel is (?P<book>.+) by (?P<author>.+)\.$"),
    "car": re.compile(r"(?P<s>.+) drives an? (?P<car>.+)\.$"),
    "training_goal": re.compile(r"(?P<s>.+) is training for (?P<race>.+) in (?P<month>\w+)\.$"),
    "relation": re.compile(r"(?P<s>.+)'s (?P<relation>.+) is (?P<relative>.+)\.$"),
    "pet": re.compile(r"(?P<s>.+) has an? (?P<breed>.+) named (?P<name>.+)\.$"),
}
_WHEN = r"On \d+ \w+ \d{4}, (?P<s>\w+) "
_EVENTS: dict[str, re.Pattern[str]] = {
    "hike": re.compile(_WHEN + r"went hiking in (?P<place>.+) with (?P<friend>\w+)\.$"),
    "event": re.compile(_WHEN + r"attended an? (?P<event>.+) in (?P<city>.+)\.$"),
    "bake": re.compile(_WHEN + r"baked an? (?P<dessert>.+) for (?P<friend>\w+)'s birthday\.$"),
    "read": re.compile(_WHEN + r"finished reading (?P<book>.+) for the book club\.$"),
    "interview": re.compile(_WHEN + r"had a job interview for an? (?P<role>.+) role at (?P<employer>.+)\.$"),
    "trip": re.compile(_WHEN + r"flew to (?P<city>.+) for (?P<reason>.+)\.$"),
    "film": re.compile(_WHEN + r"watched (?P<film>.+) at the cinema with (?P<friend>\w+)\.$"),
    "restaurant": re.compile(_WHEN + r"tried a new (?P<cuisine>.+) restaurant with (?P<friend>\w+) and"),
}


class Asker:
    """One conversation's new questions."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.rng = random.Random(f"unseen-wordings-{index}")
        self.questions: list[dict[str, Any]] = []

    def ask(self, kind: str, options: list[str], expected: list[str], **extra: Any) -> str:
        key = f"c{self.index:02d}u{len(self.questions) + 1:03d}"
        question = {"key": key, "kind": kind, "text": self.rng.choice(options),
                    "expected": expected}
        question.update({name: value for name, value in extra.items() if value is not None})
        self.questions.append(question)
        return key


def _family(attribute: str) -> str:
    return attribute.split("_")[0] if attribute.startswith(("relation_", "pet_")) else attribute


# Per standing fact: single-hop wordings, a second question's kind and wordings, and the
# wrong-speaker wording ({S} is the person asked about; None: no such question).
_PERSON: dict[str, tuple[list[str], str, list[str], str | None]] = {
    "allergy": (["Which food does {S} react badly to?", "What can {S} not eat?"], "open_domain",
                ["I'm baking for {S} next week; is there anything to keep out of the recipe?",
                 "What would make {S} sick at a dinner party?"],
                "Which food does {S} react badly to?"),
    "job": (["Who does {S} work for?", "What is {S}'s role at work?"], "open_domain",
            ["What does {S} do all day at the office?", "Is {S} employed, and as what?"],
            "Who does {S} work for?"),
    "hometown": (["Which city was {S} raised in?", "Where did {S} spend their childhood?"],
                 "open_domain", ["Which place does {S} call home?"], "Where was {S} raised?"),
    "instrument": (["Which instrument does {S} perform on?", "What ensemble does {S} belong to?"],
                   "open_domain",
                   ["Does {S} have any musical hobbies?", "Could {S} join a jam session?"],
                   "Which instrument does {S} perform on?"),
    "timezone": (["What's the local time zone for {S}?"], "open_domain",
                 ["When is a sensible hour to phone {S}?"], None),
    "favourite_book": (["Which book does {S} like best?", "What novel does {S} rate highest?"],
                       "open_domain", ["What would be a good birthday book for {S}?",
                                       "Which writer is {S} a fan of?"],
                       "Which book does {S} like best?"),
    "car": (["What model of car is {S}'s?", "What does {S} get around in?"], "open_domain",
            ["Does {S} own a car?"], "What model of car is {S}'s?"),
    "training_goal": (["Which race has {S} signed up for?", "What is {S} running in?"],
                      "temporal", ["Which month is {S} racing in?"],
                      "Which race has {S} signed up for?"),
    "pet": (["What animal does {S} keep at home?", "What is {S}'s pet called?"], "open_domain",
            ["Does {S} have any animals?"], "What animal does {S} keep at home?"),
}


def _person(q: Asker, fact: str, v: dict[str, str], key: str, other: str | None,
            rel_job: Callable[[str], str | None]) -> str | None:
    """The questions about one speaker's standing fact; returns the single-hop key.

    ``other`` is the other speaker when only this speaker has the fact's family, so a
    question naming the other speaker still has this record as its answer.
    """
    s = v["s"]
    if fact == "relation":
        relation, relative = v["relation"], v["relative"]
        job = rel_job(relative)
        if job is not None:
            q.ask("multi_hop", [f"What line of work is {s}'s {relation} in?",
                                f"What's {s}'s {relation}'s occupation?"], [key, job])
        q.ask("single_hop", [f"How does {s} know {relative}?"], [key])
        return None
    single, kind, second, wrong = _PERSON[fact]
    first = q.ask("single_hop", [w.format(S=s) for w in single], [key])
    q.ask(kind, [w.format(S=s) for w in second], [key])
    if other and wrong is not None:
        q.ask("wrong_speaker", [wrong.format(S=other)], [key])
    return first


def _episode(q: Asker, shape: str, v: dict[str, str], key: str, other: str,
             together: dict[tuple[str, str, str], list[str]]) -> None:
    s = v["s"]
    if shape == "hike":
        q.ask("single_hop", [f"Which place did {s} and {v['friend']} hike?"],
              together[("hike", s, v["friend"])])
        q.ask("temporal", [f"What day did {s} hike {v['place']}?"], [key])
    elif shape == "event":
        q.ask("temporal", [f"On which day was {s} at the {v['event']}?"], [key])
        q.ask("wrong_speaker", [f"Which city was {other} in for the {v['event']}?"], [key])
    elif shape == "bake":
        q.ask("single_hop", [f"Which dessert did {s} make for {v['friend']}?"],
              together[("bake", s, v["friend"])])
        q.ask("wrong_speaker", [f"Whose birthday did {other} bake a {v['dessert']} for?"], [key])
    elif shape == "read":
        q.ask("temporal", [f"When did {s} get to the end of {v['book']}?"], [key])
    elif shape == "interview":
        q.ask("single_hop", [f"Where did {s} apply to be a {v['role']}?"], [key])
        q.ask("temporal", [f"What day did {s} interview at {v['employer']}?"], [key])
    elif shape == "trip":
        q.ask("single_hop", [f"What took {s} to {v['city']}?"], [key])
        q.ask("temporal", [f"When was {s} in {v['city']}?"], [key])
        q.ask("open_domain", [f"Does {s} know {v['city']} at all?"], [key])
    elif shape == "film":
        q.ask("single_hop", [f"What movie did {s} and {v['friend']} go to?"],
              together[("film", s, v["friend"])])
        q.ask("temporal", [f"What date did {s} see {v['film']}?"], [key])
    else:  # restaurant
        q.ask("single_hop", [f"Who had {v['cuisine']} food with {s}?"], [key])
        q.ask("open_domain", [f"Does {s} enjoy {v['cuisine']} cooking?"], [key])


def _accounts(q: Asker, records: list[dict[str, Any]], orgs: list[str]) -> None:
    for org in orgs:
        for attribute, kind_one, wordings in (
            ("billing_contact", "numbered_name" if org[-1].isdigit() else "single_hop",
             [f"Who takes care of invoicing for {org}?", f"Which person at {org} gets our bills?",
              f"Who is the accounts contact at {org}?"]),
            ("plan", "single_hop", [f"What pricing package does {org} use?",
                                    f"Which tier is {org} subscribed to?"]),
            ("renewal_date", "temporal", [f"When is {org} up for renewal?",
                                          f"What is the renewal date of {org}'s contract?"]),
        ):
            keys = [r["key"] for r in records
                    if r["about"] == ["org", org] and r["attribute"] == attribute]
            if not keys:
                continue
            changed = attribute != "renewal_date" and len(keys) > 1
            twin = q.ask("update" if changed else kind_one, wordings, [keys[-1]],
                         current=keys[-1] if attribute != "renewal_date" else None,
                         stale=keys[:-1] if attribute != "renewal_date" else None)
        q.ask("unanswerable_attribute", [w.format(O=org) for w in UNSTORED_ORG], [], twin=twin)
    unknown = UNKNOWN_ORGS[q.index % len(UNKNOWN_ORGS)]
    q.ask("unanswerable_account", [f"Who takes care of invoicing for {unknown}?",
                                   f"What pricing package does {unknown} use?",
                                   f"When is {unknown} up for renewal?"], [], twin=twin)


def _projects(q: Asker, records: list[dict[str, Any]], projects: list[str]) -> None:
    for i, project in enumerate(projects):
        keys = {r["attribute"]: r["key"] for r in records if r["about"] == ["project", project]}
        twin = q.ask("single_hop", [f"Which environment does {project} release to?",
                                    f"Where does the {project} service run?"], [keys["deploy_target"]])
        q.ask("single_hop", [f"Who is responsible for {project}?", f"Who leads the {project} work?"],
              [keys["owner"]])
        q.ask("single_hop", [f"Which ticket covers the {project} migration?"], [keys["migration_ticket"]])
        q.ask("unanswerable_attribute", [w.format(P=project) for w in UNSTORED_PROJECT], [], twin=twin)
        unknown = UNKNOWN_PROJECTS[(q.index + i) % len(UNKNOWN_PROJECTS)]
        q.ask("unanswerable_project", [f"Who is responsible for {unknown}?",
                                       f"Which environment does {unknown} release to?"], [], twin=twin)


def build_conversation(index: int, conv: dict[str, Any]) -> list[dict[str, Any]]:
    q = Asker(index)
    records = conv["records"]
    speakers = conv["speakers"]
    families = {s: {_family(r["attribute"]) for r in records
                    if r["attribute"] and r["about"] == ["person", s]} for s in speakers}
    jobs = {r["about"][1]: r["key"] for r in records
            if r["attribute"] == "job" and r["about"][1] not in speakers}
    firsts: dict[str, list[str]] = {s: [] for s in speakers}
    for r in records:
        if not r["attribute"] or r["about"][0] != "person" or r["about"][1] not in speakers:
            continue
        fact = _family(r["attribute"])
        match = _FACTS[fact].match(r["content"])
        if match is None:
            raise SystemExit(f"{r['key']}: cannot parse {r['content']!r}")
        s = match["s"]
        other = next(o for o in speakers if o != s)
        first = _person(q, fact, match.groupdict(), r["key"],
                        other if fact not in families[other] else None, jobs.get)
        if first is not None:
            firsts[s].append(first)
    episodes = []
    together: dict[tuple[str, str, str], list[str]] = {}
    for r in records:
        if r["attribute"]:
            continue
        shape, match = next(((shape, m) for shape, pattern in _EVENTS.items()
                             if (m := pattern.match(r["content"])) is not None), ("", None))
        if match is None:
            raise SystemExit(f"{r['key']}: cannot parse {r['content']!r}")
        if "friend" in match.groupdict():
            together.setdefault((shape, match["s"], match["friend"]), []).append(r["key"])
        episodes.append((shape, match.groupdict(), r["key"]))
    for shape, values, key in episodes:
        if q.rng.random() < EPISODES_ASKED:
            other = next(o for o in speakers if o != values["s"])
            _episode(q, shape, values, key, other, together)
    _accounts(q, records, conv["orgs"])
    _projects(q, records, conv["projects"])
    by_key = {question["key"]: question for question in q.questions}
    for n, s in enumerate(speakers):
        twin = by_key[q.rng.choice(firsts[s])]
        unknown = UNKNOWN_PEOPLE[(2 * index + n) % len(UNKNOWN_PEOPLE)]
        q.ask("unanswerable_person", [twin["text"].replace(s, unknown)], [], twin=twin["key"])
        q.ask("unanswerable_attribute", [w.format(S=s) for w in UNSTORED_PERSON], [],
              twin=q.rng.choice(firsts[s]))
    return q.questions


def build() -> dict[str, Any]:
    data = json.loads(CONVERSATIONS.read_text())
    return {"version": 1, "conversations": [
        {"user": conv["user"], "questions": build_conversation(i, conv)}
        for i, conv in enumerate(data["conversations"])]}


def main() -> None:
    data = build()
    OUT.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    questions = [q for conv in data["conversations"] for q in conv["questions"]]
    print(f"wrote {OUT.name}: {len(questions)} questions, "
          f"{sum(1 for q in questions if not q['expected'])} of them unanswerable")


if __name__ == "__main__":
    main()
