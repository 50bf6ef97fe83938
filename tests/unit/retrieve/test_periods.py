"""The periods a question names: what the parser reads (and what it leaves alone), how a
named period lifts the records that meet it, and the as-of time a host-issued question in
the past tense implies."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from retold.models import SearchRequest
from retold.retrieve.periods import named_periods
from retold.testing import World

ASKED = datetime(2023, 4, 1, 8, 36, tzinfo=UTC)  # a Saturday


def _read(question: str, reference: datetime | None = ASKED) -> list[tuple[str, str]]:
    return [(p.text, p.label()) for p in named_periods(question, reference)]


@pytest.mark.parametrize(("question", "expected"), [
    ("How many days did I spend at workshops in April?", [("in April", "2023-04-01 to 2023-04-30")]),
    ("Who was the billing contact in February?", [("in February", "2023-02-01 to 2023-02-28")]),
    ("What changed in May?", [("in May", "2022-05-01 to 2022-05-31")]),  # May has not begun
    ("What did we ship in mid-March 2022?", [("in mid-March 2022", "2022-03-01 to 2022-03-31")]),
    ("What happened on 3 March?", [("3 March", "2023-03-03 to 2023-03-03")]),
    ("Did I read the March 15th issue?", [("March 15th", "2023-03-15 to 2023-03-15")]),
    ("What was decided on 2026-03-03?", [("2026-03-03", "2026-03-03 to 2026-03-03")]),
    ("Which plan did I pick in 2025?", [("in 2025", "2025-01-01 to 2025-12-31")]),
    ("Whom did I meet yesterday?", [("yesterday", "2023-03-31 to 2023-03-31")]),
    ("I got a gift last Saturday; from whom?", [("last Saturday", "2023-03-25 to 2023-03-25")]),
    ("What did I cook last week?", [("last week", "2023-03-20 to 2023-03-26")]),
    ("Where was the event I went to two weeks ago?", [("two weeks ago", "2023-03-15 to 2023-03-21")]),
    ("What did I do with Rachel two months ago?", [("two months ago", "2023-02-01 to 2023-02-28")]),
    ("How many trips this year?", [("this year", "2023-01-01 to 2023-12-31")]),
    ("Between January and March, who led billing?",
     [("Between January and March", "2023-01-01 to 2023-03-31")]),
    ("What did I pay from November to February?",
     [("from November to February", "2022-11-01 to 2023-02-28")]),
])
def test_the_parser_reads_the_period_a_question_names(question: str, expected: list[tuple[str, str]]) -> None:
    got = _read(question)
    assert [label for _, label in got] == [label for _, label in expected], got


@pytest.mark.parametrize("question", [
    "May I ask what my timezone is?",     # a month name that is a verb
    "We march on Friday to the office",   # and one that is a verb in lower case
    "How many days ago did I start?",     # a count without a number
    "What is 2025 divided by five?",      # a year-shaped number without a preposition
    "Who is the billing contact?",
])
def test_ordinary_words_name_no_period(question: str) -> None:
    assert _read(question) == []


def test_spans_counted_back_need_a_time_to_count_from() -> None:
    assert _read("What did I do last week?", None) == []
    assert [label for _, label in _read("What happened in 2025?", None)] == ["2025-01-01 to 2025-12-31"]


def _episode(world: World, text: str, when: datetime) -> str:
    world.say("user", text)
    written = world.write(type="episodic", content=text, source_kind="user_statement", evidence=text,
                          event_at=when)
    assert written.record_id is not None
    return written.record_id


def test_a_named_month_lifts_the_episode_it_holds_without_dropping_the_other(world: World) -> None:
    world.clock.set(datetime(2026, 5, 20, 12, tzinfo=UTC))
    february = _episode(world, "I went to a pottery workshop downtown.", datetime(2026, 2, 12, tzinfo=UTC))
    may = _episode(world, "I went to a painting workshop downtown.", datetime(2026, 5, 10, tzinfo=UTC))

    def ranked(question: str) -> list[str]:
        found = world.rt.tools.call("memory_search", world.p, {"queries": [question]})
        assert "error" not in found, found
        return [r["id"] for r in found["results"]]

    assert ranked("Which workshop did I go to downtown?")[0] == may  # the newer episode, by freshness
    in_february = ranked("Which workshop did I go to downtown in February?")
    assert in_february[:2] == [february, may]  # lifted first; the other is still returned
    logged = world.rt.tools.call("memory_search", world.p, {"queries": ["workshop downtown in February"]})
    world.rt.flush_search_log()
    row = world.rt.store.search_log_row(logged["search_id"])
    assert row is not None and '"in February"' in row["config_flags"]  # an operator sees what was read


def test_a_host_question_in_the_past_tense_searches_as_of_the_period(world: World) -> None:
    said = "The billing contact for Acme North is Dana Reyes."
    acme = [("org", "Acme North", "about")]
    world.say("user", said)
    dana = world.write(content="Billing contact for Acme North is Dana Reyes.", attribute="billing_contact",
                       source_kind="user_statement", evidence=said, entities=acme,
                       event_at=datetime(2026, 1, 10, tzinfo=UTC))
    marcus_text = "Billing contact for Acme North is Marcus Chen."
    world.judge.table[("Billing contact for Acme North is Dana Reyes.", marcus_text)] = "contradicts"
    world.say("user", "Marcus Chen took over billing for Acme North.")
    marcus = world.write(content=marcus_text, attribute="billing_contact", source_kind="user_statement",
                         evidence="Marcus Chen took over billing for Acme North", entities=acme,
                         valid_from=datetime(2026, 3, 1, tzinfo=UTC))
    assert marcus.outcome == f"superseded:{dana.record_id}"
    question = "Who was the billing contact for Acme North in February?"

    def first(trigger: str) -> str:
        outcome = world.rt.retriever.search(world.p, SearchRequest(queries=[question], trigger=trigger))  # type: ignore[arg-type]
        assert outcome.response.results, outcome.rendered
        return outcome.response.results[0].record.id

    assert first("host") == dana.record_id
    # A question the model asks itself keeps today's answer first: it can pass as_of.
    assert first("tool") == marcus.record_id
    now = world.rt.retriever.search(world.p, SearchRequest(
        queries=["Who is the billing contact for Acme North?"], trigger="host"))
    assert [r.record.id for r in now.response.results][:1] == [marcus.record_id]
