"""Builds the labelled conversational retrieval set in benchmarks/data/conversations.json.

Each conversation is one user's memory: two speakers talking over about twenty dated
sessions, the people, accounts and projects they mention, and the facts a memory layer
would keep from them (semantic facts with an attribute, dated episodic events, facts that
change over time and so supersede earlier ones). Questions are written against those facts
by kind, including questions whose answer is not stored at all, each unanswerable one
beside an answerable twin of the same shape.

Everything is synthetic: names, companies, places and values come from the pools below and
are combined by a seeded generator, so the file is reproducible
(``python -m benchmarks.conversations`` rewrites it). The phrasing pools are deliberately
wide (several wordings per fact and per question kind, paraphrases that share few words
with the fact) so that floors tuned on one half of the conversations are tested on
wordings and values they did not see in the same combination. The file, not this script,
is what the benchmark reads; see benchmarks/data/README.md for its layout.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from datetime import date, timedelta
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parent / "data" / "conversations.json"
SEED = 20261201
CONVERSATIONS = 12
SESSIONS = 20

FIRST = [
    "Caroline",
    "Melanie",
    "Joanna",
    "Nate",
    "Aditya",
    "Farah",
    "Tomasz",
    "Priya",
    "Olu",
    "Mei",
    "Kiran",
    "Rosa",
    "Dmitri",
    "Ingrid",
    "Hugo",
    "Amara",
    "Lucia",
    "Mateo",
    "Sanjay",
    "Yuki",
    "Leila",
    "Bruno",
    "Chiara",
    "Emeka",
    "Hana",
    "Isak",
    "Jonas",
    "Keiko",
    "Lars",
    "Maya",
    "Noor",
    "Oskar",
    "Paloma",
    "Quentin",
    "Rahel",
    "Sven",
    "Talia",
    "Umar",
    "Vera",
    "Wren",
    "Xavier",
    "Yara",
    "Zane",
    "Beatrix",
    "Cyrus",
    "Delphine",
    "Elias",
    "Fiona",
    "Gideon",
    "Helena",
    "Ivo",
    "Jasmin",
    "Kofi",
    "Lena",
    "Marco",
    "Nadia",
    "Otto",
    "Petra",
    "Ravi",
    "Selma",
    "Theo",
    "Ursula",
    "Viktor",
    "Willa",
    "Ayla",
    "Bodhi",
    "Celeste",
    "Dario",
    "Esme",
    "Felix",
    "Greta",
    "Hamza",
    "Iris",
    "Jude",
    "Kaia",
    "Luka",
    "Mina",
    "Niall",
    "Orla",
    "Pia",
    "Rafael",
    "Sadie",
    "Tobias",
    "Una",
    "Valentin",
    "Wanda",
]
UNKNOWN_PEOPLE = [
    "Zelda",
    "Horatio",
    "Brunhilde",
    "Cassius",
    "Octavia",
    "Leopold",
    "Marisol",
    "Thaddeus",
    "Ximena",
    "Bartholomew",
    "Guinevere",
    "Lysander",
    "Persephone",
    "Evander",
    "Clementine",
    "Ignatius",
    "Rosalind",
    "Alaric",
    "Philippa",
    "Casimir",
    "Seraphina",
    "Barnaby",
    "Henrietta",
    "Florian",
]
ORG_STEMS = """Acme North|Harbor Labs|Bluefin Logistics|Kestrel Health|Northwind Foods|Quarry
Analytics|Lumen Retail|Granite Insurance|Pioneer Freight|Orchid Biotech|Summit Dental|Copper
Kettle Cafes|Vantage Robotics|Meridian Travel|Sable Security|Tidewater Energy|Juniper
Schools|Falconer Media|Redwood Capital|Beacon Clinics""".replace("\n", " ").split("|")
UNKNOWN_ORGS = """Brightwater Labs|Ironclad Mutual|Saffron Kitchens|Polaris Shipping|Hollow Pine
Studios|Crescent Pharma|Ember Aviation|Silverline Telecom|Oakmoor Hotels|Zephyr
Apparel""".replace("\n", " ").split("|")
PROJECTS = [
    "Apollo",
    "Atlas",
    "Borealis",
    "Cobalt",
    "Daybreak",
    "Ember",
    "Fjord",
    "Gemini",
    "Halcyon",
    "Indigo",
    "Jetstream",
    "Kiwi",
    "Lighthouse",
    "Monsoon",
    "Nimbus",
    "Orion",
    "Prism",
    "Quasar",
    "Riverbend",
    "Sequoia",
    "Tundra",
    "Umbra",
    "Vortex",
    "Willow",
]
UNKNOWN_PROJECTS = [
    "Falcon",
    "Marigold",
    "Obsidian",
    "Pegasus",
    "Rainier",
    "Solstice",
    "Thunderbird",
    "Zenith",
    "Cascade",
    "Mistral",
]

PETS = [
    ("dog", "golden retriever"),
    ("dog", "beagle"),
    ("dog", "border collie"),
    ("cat", "tabby cat"),
    ("cat", "Maine Coon"),
    ("rabbit", "lop-eared rabbit"),
    ("parrot", "grey parrot"),
    ("tortoise", "Greek tortoise"),
    ("dog", "dachshund"),
    ("cat", "Siamese cat"),
]
PET_NAMES = [
    "Biscuit",
    "Pepper",
    "Mochi",
    "Luna",
    "Otis",
    "Juniper",
    "Waffles",
    "Ziggy",
    "Clementine",
    "Noodle",
    "Pixel",
    "Basil",
    "Maple",
    "Tofu",
    "Ginger",
    "Rocket",
    "Pickles",
    "Hazel",
    "Bruno",
    "Sprout",
]
FOODS = [
    "peanuts",
    "shellfish",
    "sesame",
    "kiwi fruit",
    "strawberries",
    "gluten",
    "soy",
    "walnuts",
    "mustard",
    "celery",
]
ROLES = [
    ("nurse", "Kestrel Hospital"),
    ("data engineer", "Pinecrest Bank"),
    ("high school chemistry teacher", "Westbrook Academy"),
    ("UX designer", "Fernleaf Studio"),
    ("paramedic", "the county ambulance service"),
    ("structural engineer", "Halden & Partners"),
    ("pastry chef", "Maison Clair"),
    ("product manager", "Trellis Software"),
    ("veterinarian", "Oakfield Animal Clinic"),
    ("journalist", "the Riverside Gazette"),
    ("pharmacist", "Greenway Pharmacy"),
    ("landscape architect", "Verdant Works"),
]
CITIES = [
    "Lisbon",
    "Krakow",
    "Osaka",
    "Valparaiso",
    "Nairobi",
    "Tallinn",
    "Montreal",
    "Porto Alegre",
    "Ljubljana",
    "Hobart",
    "Edinburgh",
    "Tucson",
    "Bergen",
    "Chiang Mai",
]
INSTRUMENTS = [
    ("cello", "community orchestra"),
    ("bass guitar", "jazz trio"),
    ("violin", "string quartet"),
    ("drums", "punk band"),
    ("saxophone", "big band"),
    ("ukulele", "folk group"),
    ("piano", "church choir"),
    ("trumpet", "brass ensemble"),
]
TIMEZONES = [
    "Pacific",
    "Central European",
    "Eastern",
    "Japan Standard",
    "Mountain",
    "Eastern European",
    "Australian Eastern",
    "India Standard",
]
BOOKS = [
    ("The Left Hand of Darkness", "Ursula K. Le Guin"),
    ("Middlemarch", "George Eliot"),
    ("Beloved", "Toni Morrison"),
    ("The Remains of the Day", "Kazuo Ishiguro"),
    ("Piranesi", "Susanna Clarke"),
    ("Things Fall Apart", "Chinua Achebe"),
    ("The Name of the Rose", "Umberto Eco"),
    ("Station Eleven", "Emily St. John Mandel"),
    ("Pachinko", "Min Jin Lee"),
    ("Dune", "Frank Herbert"),
]
CARS = [
    "red Volvo estate",
    "silver Toyota Prius",
    "green Subaru Outback",
    "blue Fiat 500",
    "white Ford Transit van",
    "black Honda Civic",
    "yellow Renault Zoe",
    "grey Skoda Octavia",
]
RACES = [
    "Berlin Marathon",
    "Chicago half marathon",
    "Ironman Lanzarote",
    "Lisbon 10K",
    "Tokyo Marathon",
    "a local trail ultra",
    "the Dublin Marathon",
    "a sprint triathlon",
]
PLACES = [
    "Yosemite",
    "the Cairngorms",
    "the Dolomites",
    "Zion National Park",
    "Lake District",
    "Torres del Paine",
    "the Blue Mountains",
    "Banff",
    "Snowdonia",
    "the Julian Alps",
    "Mount Rainier",
    "the Black Forest",
]
EVENTS = [
    "pottery workshop",
    "LGBTQ support group meeting",
    "charity fun run",
    "jazz festival",
    "startup pitch night",
    "book club meeting",
    "salsa class",
    "climate march",
    "wine tasting",
    "photography exhibition",
    "coding bootcamp open day",
    "community garden cleanup",
    "chess tournament",
    "stand-up comedy night",
]
DESSERTS = [
    "lemon drizzle cake",
    "chocolate babka",
    "pavlova",
    "carrot cake",
    "tiramisu",
    "apple strudel",
    "matcha cheesecake",
    "banana bread",
]
PLANS = ["Starter", "Team", "Business", "Enterprise", "Growth", "Scale"]
CLUSTERS = ["staging-eu", "prod-us-east", "canary", "blue-green", "prod-eu-west", "edge-apac"]
MONTHS = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
]
RELATIONS = ["sister", "brother", "cousin", "best friend", "neighbour", "mentor"]
REL_JOBS = [
    "firefighter",
    "marine biologist",
    "tattoo artist",
    "airline pilot",
    "librarian",
    "carpenter",
    "dentist",
    "wedding photographer",
    "sommelier",
    "park ranger",
]
# Attributes never stored for anyone: questions about them have no answer.
UNSTORED_PERSON = [
    "What is {S}'s blood type?",
    "What is {S}'s shoe size?",
    "Which university did {S} graduate from?",
    "What is {S}'s middle name?",
    "How tall is {S}?",
    "What is {S}'s favourite football team?",
]
UNSTORED_ORG = [
    "What is {O}'s stock ticker?",
    "How many employees does {O} have?",
    "Where is {O} headquartered?",
    "What is {O}'s VAT number?",
    "Who founded {O}?",
    "What was {O}'s revenue last year?",
]
UNSTORED_PROJECT = [
    "What is the budget for project {P}?",
    "Which database does {P} use?",
    "What is the launch date of {P}?",
    "How many engineers work on {P}?",
]


@dataclass
class Conv:
    """One conversation being generated."""

    index: int
    rng: random.Random
    a: str
    b: str
    others: list[str]
    orgs: list[str]
    projects: list[str]
    dates: list[date]
    records: list[dict[str, Any]] = field(default_factory=list)
    questions: list[dict[str, Any]] = field(default_factory=list)

    @property
    def user(self) -> str:
        return f"conv{self.index:02d}"

    def record(
        self,
        session: int,
        speaker: str,
        type_: str,
        content: str,
        about: tuple[str, str],
        attribute: str | None,
        evidence: str,
        mentions: list[tuple[str, str]] | None = None,
    ) -> str:
        key = f"c{self.index:02d}r{len(self.records) + 1:03d}"
        self.records.append(
            {
                "key": key,
                "session": session,
                "date": self.dates[session].isoformat(),
                "speaker": speaker,
                "type": type_,
                "content": content,
                "about": list(about),
                "attribute": attribute,
                "evidence": evidence,
                "mentions": [list(m) for m in (mentions or [])],
            }
        )
        return key

    def ask(
        self,
        kind: str,
        text: str,
        expected: list[str],
        *,
        twin: str | None = None,
        current: str | None = None,
        stale: list[str] | None = None,
    ) -> str:
        key = f"c{self.index:02d}q{len(self.questions) + 1:03d}"
        q: dict[str, Any] = {"key": key, "kind": kind, "text": text, "expected": expected}
        if twin is not None:
            q["twin"] = twin
        if current is not None:
            q["current"], q["stale"] = current, stale or []
        self.questions.append(q)
        return key

    def pick(self, options: list[Any]) -> Any:
        return self.rng.choice(options)

    def session(self) -> int:
        return self.rng.randrange(SESSIONS)

    def when(self, session: int) -> str:
        d = self.dates[session]
        return f"{d.day} {MONTHS[d.month - 1]} {d.year}"


FAMILIES = (
    "pet",
    "allergy",
    "job",
    "hometown",
    "instrument",
    "timezone",
    "book",
    "car",
    "race",
    "relative",
)


def _person_facts(
    c: Conv, s: str, other: str, pools: dict[str, list[Any]], mine: set[str], theirs: set[str]
) -> None:
    """The standing facts about one speaker, with their questions.

    Each speaker has only some fact families; a wrong-speaker question asks the other
    speaker's name about a family only this speaker has, so its answer is still this
    speaker's record (the question got the person wrong, not the fact).
    """

    def wrong(text: str, key: str, family: str) -> None:
        if family not in theirs:
            c.ask("wrong_speaker", text, [key])

    for family, make in (
        ("pet", _pet),
        ("allergy", _allergy),
        ("job", _job),
        ("hometown", _hometown),
        ("instrument", _instrument),
        ("timezone", _timezone),
        ("book", _book),
        ("car", _car),
        ("race", _race),
        ("relative", _relative),
    ):
        if family in mine:
            make(c, s, other, pools, wrong)


def _pet(c: Conv, s: str, other: str, pools: dict[str, list[Any]], wrong: Any) -> None:
    kind, breed = pools["pet"].pop()
    pet_name = pools["pet_name"].pop()
    k = c.record(
        c.session(),
        s,
        "semantic",
        f"{s} has a {breed} named {pet_name}.",
        ("person", s),
        f"pet_{kind}",
        f"Our {breed} {pet_name} chewed my shoes again!",
    )
    c.ask(
        "single_hop",
        c.pick(
            [
                f"What is the name of {s}'s {kind}?",
                f"What's {s}'s {kind} called?",
                f"What kind of pet does {s} have?",
            ]
        ),
        [k],
    )
    wrong(
        c.pick([f"What is the name of {other}'s {kind}?", f"What breed is {other}'s {kind}?"]),
        k,
        "pet",
    )
    c.ask("one_word", pet_name, [k])


def _allergy(c: Conv, s: str, other: str, pools: dict[str, list[Any]], wrong: Any) -> None:
    food = pools["food"].pop()
    k = c.record(
        c.session(),
        s,
        "semantic",
        f"{s} is allergic to {food}.",
        ("person", s),
        "allergy",
        f"I can't eat anything with {food}, I'm allergic.",
    )
    c.ask(
        "single_hop",
        c.pick(
            [
                f"What is {s} allergic to?",
                f"Does {s} have any food allergies?",
                f"Which food should {s} avoid?",
            ]
        ),
        [k],
    )
    c.ask(
        "open_domain",
        c.pick(
            [
                f"What should I leave out when I cook dinner for {s}?",
                f"Is there an ingredient that makes {s} ill?",
            ]
        ),
        [k],
    )
    c.ask("one_word", food, [k])
    wrong(f"What is {other} allergic to?", k, "allergy")


def _job(c: Conv, s: str, other: str, pools: dict[str, list[Any]], wrong: Any) -> None:
    role, employer = pools["role"].pop()
    k = c.record(
        c.session(),
        s,
        "semantic",
        f"{s} works as a {role} at {employer}.",
        ("person", s),
        "job",
        f"I've been a {role} at {employer} for a while now.",
    )
    c.ask(
        "single_hop",
        c.pick([f"What does {s} do for a living?", f"Where does {s} work?", f"What is {s}'s job?"]),
        [k],
    )
    c.ask(
        "open_domain",
        c.pick([f"Which profession did {s} choose?", f"How does {s} earn money?"]),
        [k],
    )
    wrong(f"Where does {other} work?", k, "job")


def _hometown(c: Conv, s: str, other: str, pools: dict[str, list[Any]], wrong: Any) -> None:
    city = pools["city"].pop()
    k = c.record(
        c.session(),
        s,
        "semantic",
        f"{s} grew up in {city}.",
        ("person", s),
        "hometown",
        f"Back home in {city} we used to do that every summer.",
    )
    c.ask(
        "single_hop",
        c.pick(
            [
                f"Where did {s} grow up?",
                f"Where is {s} from originally?",
                f"What is {s}'s hometown?",
            ]
        ),
        [k],
    )
    wrong(f"Which city did {other} grow up in?", k, "hometown")


def _instrument(c: Conv, s: str, other: str, pools: dict[str, list[Any]], wrong: Any) -> None:
    instrument, group = pools["instrument"].pop()
    k = c.record(
        c.session(),
        s,
        "semantic",
        f"{s} plays the {instrument} in a {group}.",
        ("person", s),
        "instrument",
        f"Rehearsal with the {group} tonight, bringing my {instrument}.",
    )
    c.ask("single_hop", c.pick([f"What instrument does {s} play?", f"Which band is {s} in?"]), [k])
    c.ask("open_domain", c.pick([f"What kind of music is {s} into?", f"Is {s} musical?"]), [k])
    c.ask("two_word", f"{s} {instrument.split()[-1]}", [k])
    wrong(f"What instrument does {other} play?", k, "instrument")


def _timezone(c: Conv, s: str, other: str, pools: dict[str, list[Any]], wrong: Any) -> None:
    tz = pools["tz"].pop()
    k = c.record(
        c.session(),
        s,
        "semantic",
        f"{s}'s timezone is {tz} Time.",
        ("person", s),
        "timezone",
        f"Remember I'm on {tz} Time, so mornings are tricky.",
    )
    c.ask(
        "single_hop",
        c.pick([f"What timezone is {s} in?", f"Which time zone does {s} live in?"]),
        [k],
    )
    c.ask("two_word", f"{s} timezone", [k])


def _book(c: Conv, s: str, other: str, pools: dict[str, list[Any]], wrong: Any) -> None:
    book, author = pools["book"].pop()
    k = c.record(
        c.session(),
        s,
        "semantic",
        f"{s}'s favourite novel is {book} by {author}.",
        ("person", s),
        "favourite_book",
        f"Nothing beats {book}, I reread it every year.",
    )
    c.ask(
        "single_hop",
        c.pick([f"What is {s}'s favourite book?", f"Which novel does {s} love most?"]),
        [k],
    )
    c.ask(
        "open_domain",
        c.pick([f"What should I get {s} to read?", f"Which author does {s} admire?"]),
        [k],
    )
    wrong(f"What is {other}'s favourite novel?", k, "book")


def _car(c: Conv, s: str, other: str, pools: dict[str, list[Any]], wrong: Any) -> None:
    car = pools["car"].pop()
    k = c.record(
        c.session(),
        s,
        "semantic",
        f"{s} drives a {car}.",
        ("person", s),
        "car",
        f"My {car} broke down on the motorway again.",
    )
    c.ask("single_hop", c.pick([f"What car does {s} drive?", f"What vehicle does {s} own?"]), [k])
    wrong(f"What car does {other} drive?", k, "car")


def _race(c: Conv, s: str, other: str, pools: dict[str, list[Any]], wrong: Any) -> None:
    race = pools["race"].pop()
    month = c.pick(MONTHS)
    k = c.record(
        c.session(),
        s,
        "semantic",
        f"{s} is training for {race} in {month}.",
        ("person", s),
        "training_goal",
        f"Long run on Sunday, {race} is in {month}!",
    )
    c.ask(
        "single_hop",
        c.pick([f"What race is {s} training for?", f"Which event is {s} preparing for?"]),
        [k],
    )
    c.ask("temporal", f"In which month is {s}'s race?", [k])
    wrong(f"Which race is {other} training for?", k, "race")


def _relative(c: Conv, s: str, other: str, pools: dict[str, list[Any]], wrong: Any) -> None:
    # A relative: two records, one question needing both (multi-hop).
    relation = pools["relation"].pop()
    relative = pools["other"].pop()
    job = pools["rel_job"].pop()
    k1 = c.record(
        c.session(),
        s,
        "semantic",
        f"{s}'s {relation} is {relative}.",
        ("person", s),
        f"relation_{relation.replace(' ', '_')}",
        f"My {relation} {relative} called me yesterday.",
        [("person", relative)],
    )
    k2 = c.record(
        c.session(),
        s,
        "semantic",
        f"{relative} works as a {job}.",
        ("person", relative),
        "job",
        f"{relative} just got promoted, still a {job} though.",
    )
    c.ask(
        "multi_hop",
        c.pick(
            [f"What does {s}'s {relation} do for work?", f"What is the job of {s}'s {relation}?"]
        ),
        [k1, k2],
    )
    c.ask("single_hop", f"Who is {relative}?", [k1, k2])


FILMS = [
    "Paddington 2",
    "Spirited Away",
    "Arrival",
    "The Grand Budapest Hotel",
    "Parasite",
    "Past Lives",
    "Mad Max: Fury Road",
    "Amelie",
    "Moonlight",
    "Roma",
    "Whiplash",
    "Perfect Days",
    "Aftersun",
    "Drive My Car",
]
CUISINES = [
    "Ethiopian",
    "Peruvian",
    "Georgian",
    "Sichuan",
    "Lebanese",
    "Oaxacan",
    "Sri Lankan",
    "Basque",
    "Korean",
    "Moroccan",
]


def _events(c: Conv, s: str, other: str, pools: dict[str, list[Any]]) -> None:
    """Dated episodic events for one speaker; about half of them get questions.

    Each speaker draws places, events, desserts, books, employers, cities and cuisines from
    their own half of the pools, so an event never has a twin by the other speaker and a
    wrong-speaker question about it still has exactly one answer.
    """
    items: list[tuple[str, Any]] = [
        (shape, value) for shape in pools["event_shapes"] for value in pools[f"ev_{shape}"]
    ]
    c.rng.shuffle(items)
    # Every record of one (shape, friend) pair answers a question naming that pair, so the
    # expected list is shared and grows as more such events are written.
    groups: dict[tuple[str, str], list[str]] = {}

    def together(group: tuple[str, str], key: str) -> list[str]:
        return groups.setdefault(group, [])  # ``key`` joins it just below

    for shape, value in items:
        session = c.session()
        when = c.when(session)
        friend = c.pick(c.others)
        asked = c.rng.random() < 0.5
        if shape == "hike":
            k = c.record(
                session,
                s,
                "episodic",
                f"On {when}, {s} went hiking in {value} with {friend}.",
                ("person", s),
                None,
                f"Just back from hiking in {value} with {friend}!",
                [("person", friend)],
            )
            if asked:
                c.ask(
                    "single_hop",
                    f"Where did {s} go hiking with {friend}?",
                    together(("hike", friend), k),
                )
                c.ask(
                    "temporal",
                    c.pick(
                        [
                            f"When did {s} go hiking in {value}?",
                            f"On what date was {s}'s hike in {value}?",
                        ]
                    ),
                    [k],
                )
                c.ask("multi_hop", f"Who went hiking in {value} with {s}, and when?", [k])
        elif shape == "event":
            city = c.pick(CITIES)
            k = c.record(
                session,
                s,
                "episodic",
                f"On {when}, {s} attended a {value} in {city}.",
                ("person", s),
                None,
                f"Went to a {value} in {city} today, loved it.",
            )
            if asked:
                c.ask(
                    "temporal",
                    c.pick(
                        [
                            f"When did {s} go to the {value}?",
                            f"What date did {s} attend the {value} in {city}?",
                        ]
                    ),
                    [k],
                )
                c.ask("wrong_speaker", f"Where did {other} attend a {value}?", [k])
        elif shape == "bake":
            k = c.record(
                session,
                s,
                "episodic",
                f"On {when}, {s} baked a {value} for {friend}'s birthday.",
                ("person", s),
                None,
                f"Baked a {value} for {friend}'s birthday, it vanished in minutes.",
                [("person", friend)],
            )
            if asked:
                c.ask(
                    "single_hop",
                    f"What did {s} bake for {friend}'s birthday?",
                    together(("bake", friend), k),
                )
                c.ask("wrong_speaker", f"Who did {other} bake a {value} for?", [k])
        elif shape == "read":
            k = c.record(
                session,
                s,
                "episodic",
                f"On {when}, {s} finished reading {value} for the book club.",
                ("person", s),
                None,
                f"Finally finished {value}, what an ending.",
            )
            if asked:
                c.ask("temporal", f"When did {s} finish reading {value}?", [k])
        elif shape == "interview":
            role, employer = value
            k = c.record(
                session,
                s,
                "episodic",
                f"On {when}, {s} had a job interview for a {role} role at {employer}.",
                ("person", s),
                None,
                f"Interview at {employer} went okay I think.",
            )
            if asked:
                c.ask("single_hop", f"Which company interviewed {s} for a {role} position?", [k])
                c.ask("temporal", f"When was {s}'s interview at {employer}?", [k])
        elif shape == "trip":
            reason = c.pick(
                [
                    "a friend's wedding",
                    "a conference",
                    "a family reunion",
                    "a week of surfing",
                    "a language course",
                ]
            )
            k = c.record(
                session,
                s,
                "episodic",
                f"On {when}, {s} flew to {value} for {reason}.",
                ("person", s),
                None,
                f"Landed in {value}! Here for {reason}.",
            )
            if asked:
                c.ask("single_hop", f"Why did {s} travel to {value}?", [k])
                c.ask("temporal", f"When did {s} fly to {value}?", [k])
                c.ask("open_domain", f"Has {s} ever been to {value}?", [k])
        elif shape == "film":
            k = c.record(
                session,
                s,
                "episodic",
                f"On {when}, {s} watched {value} at the cinema with {friend}.",
                ("person", s),
                None,
                f"Saw {value} with {friend} tonight, still thinking about it.",
                [("person", friend)],
            )
            if asked:
                c.ask(
                    "single_hop",
                    f"Which film did {s} see with {friend}?",
                    together(("film", friend), k),
                )
                c.ask("temporal", f"When did {s} watch {value}?", [k])
        else:  # restaurant
            k = c.record(
                session,
                s,
                "episodic",
                f"On {when}, {s} tried a new {value} restaurant with {friend} and loved the food.",
                ("person", s),
                None,
                f"That {value} place with {friend} was incredible.",
                [("person", friend)],
            )
            if asked:
                c.ask("single_hop", f"Who went to the {value} restaurant with {s}?", [k])
                c.ask("open_domain", f"Would {s} recommend {value} food?", [k])
        if shape in ("hike", "bake", "film"):
            groups.setdefault((shape, friend), []).append(k)


def _accounts(c: Conv, pools: dict[str, list[Any]]) -> None:
    """Accounts with numbered names and contacts and plans that change over time."""
    stem = pools["org"].pop()
    names = [stem, f"{stem} 2", f"{stem} 3"] + [pools["org"].pop() for _ in range(2)]
    c.orgs = names
    speaker = c.a
    billing: dict[str, str] = {}
    for name in names:
        sessions = sorted(c.rng.sample(range(SESSIONS), c.rng.randrange(1, 4)))
        contacts = c.rng.sample(c.others, len(sessions))
        keys = []
        for session, person in zip(sessions, contacts, strict=True):
            keys.append(
                c.record(
                    session,
                    speaker,
                    "semantic",
                    f"The billing contact for {name} is {person}.",
                    ("org", name),
                    "billing_contact",
                    f"For {name} invoices, talk to {person} now.",
                    [("person", person)],
                )
            )
        wording = c.pick(
            [
                "Who is the billing contact for {O}?",
                "Who handles billing at {O}?",
                "Whom do I send {O}'s invoices to?",
            ]
        )
        current = keys[-1]
        billing[name] = c.ask(
            "update" if len(keys) > 1 else "numbered_name" if name[-1].isdigit() else "single_hop",
            wording.format(O=name),
            [current],
            current=current,
            stale=keys[:-1],
        )
        plan_sessions = sorted(c.rng.sample(range(SESSIONS), c.rng.randrange(1, 3)))
        plan_keys = [
            c.record(
                session,
                speaker,
                "semantic",
                f"{name} is on the {plan} plan.",
                ("org", name),
                "plan",
                f"{name} moved to {plan} this quarter.",
            )
            for session, plan in zip(
                plan_sessions, c.rng.sample(PLANS, len(plan_sessions)), strict=True
            )
        ]
        twin = c.ask(
            "update" if len(plan_keys) > 1 else "single_hop",
            c.pick(["Which plan is {O} on?", "What subscription tier does {O} have?"]).format(
                O=name
            ),
            [plan_keys[-1]],
            current=plan_keys[-1],
            stale=plan_keys[:-1],
        )
        c.ask("unanswerable_attribute", c.pick(UNSTORED_ORG).format(O=name), [], twin=twin)
        renewal = c.dates[c.session()] + timedelta(days=365)
        k = c.record(
            c.session(),
            speaker,
            "semantic",
            f"{name}'s contract renews on {renewal.day} {MONTHS[renewal.month - 1]} {renewal.year}.",
            ("org", name),
            "renewal_date",
            f"{name} renewal is due {renewal.isoformat()}.",
        )
        c.ask("temporal", f"When does the {name} contract renew?", [k])
    unknown = pools["unknown_org"].pop()
    twin = billing[c.pick(names)]
    c.ask(
        "unanswerable_account",
        c.pick(
            [
                f"Who is the billing contact for {unknown}?",
                f"Which plan is {unknown} on?",
                f"When does the {unknown} contract renew?",
            ]
        ),
        [],
        twin=twin,
    )


def _projects(c: Conv, pools: dict[str, list[Any]]) -> None:
    """Projects with deploy targets, tickets and owners; identifier queries."""
    for _ in range(3):
        project = pools["project"].pop()
        c.projects.append(project)
        cluster = c.pick(CLUSTERS)
        owner = c.pick(c.others)
        prefix = project[:3].upper()
        ticket = f"{prefix}-{c.rng.randrange(100, 999)}"
        k_deploy = c.record(
            c.session(),
            c.b,
            "semantic",
            f"Project {project} deploys through the {cluster} cluster.",
            ("project", project),
            "deploy_target",
            f"{project} goes out via {cluster}, don't skip it.",
        )
        k_ticket = c.record(
            c.session(),
            c.b,
            "semantic",
            f"The migration for {project} is tracked in ticket {ticket}.",
            ("project", project),
            "migration_ticket",
            f"See {ticket} for the migration plan.",
        )
        k_owner = c.record(
            c.session(),
            c.b,
            "semantic",
            f"{owner} owns the {project} project.",
            ("project", project),
            "owner",
            f"{owner} is running {project} now.",
            [("person", owner)],
        )
        twin = c.ask(
            "single_hop",
            c.pick(
                [f"Where does {project} deploy?", f"Which cluster does project {project} ship to?"]
            ),
            [k_deploy],
        )
        c.ask("identifier", ticket, [k_ticket])
        c.ask("identifier", f"what is {ticket} about", [k_ticket])
        c.ask("single_hop", f"Who owns project {project}?", [k_owner])
        c.ask("two_word", f"{project} owner", [k_owner])
        c.ask("unanswerable_attribute", c.pick(UNSTORED_PROJECT).format(P=project), [], twin=twin)
        unknown = pools["unknown_project"].pop()
        c.ask(
            "unanswerable_project",
            c.pick(
                [
                    f"Where does project {unknown} deploy?",
                    f"Who owns the {unknown} project?",
                    f"Which ticket tracks the {unknown} migration?",
                ]
            ),
            [],
            twin=twin,
        )


def _unknown_people(c: Conv, pools: dict[str, list[Any]]) -> None:
    """Questions about people nobody mentioned, each beside a twin about a speaker."""
    for s in (c.a, c.b):
        person_qs = [
            q
            for q in c.questions
            if q["kind"] == "single_hop" and q["text"].count(s) == 1 and len(q["expected"]) == 1
        ]
        twin_q = c.pick(person_qs)
        unknown = pools["unknown_person"].pop()
        c.ask("unanswerable_person", twin_q["text"].replace(s, unknown), [], twin=twin_q["key"])
        twin_attr = c.pick(person_qs)
        c.ask(
            "unanswerable_attribute", c.pick(UNSTORED_PERSON).format(S=s), [], twin=twin_attr["key"]
        )


def _halves(pool: list[Any], r: random.Random) -> tuple[list[Any], list[Any]]:
    shuffled = r.sample(pool, len(pool))
    return shuffled[: len(pool) // 2], shuffled[len(pool) // 2 :]


def build() -> dict[str, Any]:
    rng = random.Random(SEED)
    people = FIRST[:]
    rng.shuffle(people)
    conversations = []
    for index in range(CONVERSATIONS):
        r = random.Random(rng.randrange(1 << 30))
        start = date(2026, 1, 5) + timedelta(days=r.randrange(60))
        dates = [start + timedelta(days=9 * i + r.randrange(4)) for i in range(SESSIONS)]
        a, b = people.pop(), people.pop()
        others = [people.pop() for _ in range(5)]
        c = Conv(index, r, a, b, others, [], [], dates)
        pools: dict[str, list[Any]] = {
            "pet": r.sample(PETS, 2),
            "pet_name": r.sample(PET_NAMES, 2),
            "food": r.sample(FOODS, 2),
            "role": r.sample(ROLES, 2),
            "city": r.sample(CITIES, 2),
            "instrument": r.sample(INSTRUMENTS, 2),
            "tz": r.sample(TIMEZONES, 2),
            "book": r.sample(BOOKS, 2),
            "car": r.sample(CARS, 2),
            "race": r.sample(RACES, 2),
            "relation": r.sample(RELATIONS, 2),
            "rel_job": r.sample(REL_JOBS, 2),
            "other": others[:2],
            "org": r.sample(ORG_STEMS, 3),
            "unknown_org": [UNKNOWN_ORGS[index % len(UNKNOWN_ORGS)]],
            "project": r.sample(PROJECTS, 3),
            "unknown_project": [
                UNKNOWN_PROJECTS[(index + i) % len(UNKNOWN_PROJECTS)] for i in range(3)
            ],
            "unknown_person": [
                UNKNOWN_PEOPLE[(2 * index + i) % len(UNKNOWN_PEOPLE)] for i in range(2)
            ],
        }
        families = {s: set(r.sample(FAMILIES, 7)) for s in (a, b)}
        _person_facts(c, a, b, pools, families[a], families[b])
        _person_facts(c, b, a, pools, families[b], families[a])
        timezones = [rec["key"] for rec in c.records if rec["attribute"] == "timezone"]
        if timezones:
            c.ask("one_word", "timezone", timezones)
        event_pools = {
            "hike": PLACES,
            "event": EVENTS,
            "bake": DESSERTS,
            "read": [b_ for b_, _ in BOOKS],
            "interview": ROLES,
            "trip": CITIES,
            "restaurant": CUISINES,
            "film": FILMS,
        }
        split = {shape: _halves(pool, r) for shape, pool in event_pools.items()}
        for side, speaker, other in ((0, a, b), (1, b, a)):
            own = {f"ev_{shape}": halves[side] for shape, halves in split.items()}
            _events(c, speaker, other, {"event_shapes": list(event_pools), **own})
        _accounts(c, pools)
        _projects(c, pools)
        _unknown_people(c, pools)
        conversations.append(
            {
                "user": c.user,
                "speakers": [a, b],
                "others": others,
                "orgs": c.orgs,
                "projects": c.projects,
                "sessions": [d.isoformat() for d in dates],
                "records": c.records,
                "questions": c.questions,
            }
        )
    return {"version": 1, "seed": SEED, "conversations": conversations}


def main() -> None:
    data = build()
    OUT.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    records = sum(len(c["records"]) for c in data["conversations"])
    questions = sum(len(c["questions"]) for c in data["conversations"])
    print(
        f"wrote {OUT.name}: {len(data['conversations'])} conversations, {records} records, "
        f"{questions} questions"
    )


if __name__ == "__main__":
    main()
