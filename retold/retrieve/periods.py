"""The periods a question names: a date, a month, a year, or a span counted back from now.

Read by a small parser of our own, because the forms that matter are few and the
libraries that find dates in free text also read ordinary words as dates ("may", "march",
"second") and cost milliseconds a question. What it reads, case-insensitively:

- a calendar date: ``2026-03-03``, ``3 March``, ``March 3rd``, ``3 March 2026``,
  ``March 3, 2026`` (the day); ``2026-03`` (the month);
- a month: ``in February``, ``February 2025``, ``since March`` (the month);
  ``between January and March``, ``from May to July 2025`` (those months). A month
  name is read only beside a word that makes it a date (a preposition such as in, on,
  since, during, before, after, until, of; early, mid or late; last or this; or a year or
  day number next to it), since "may" and "march" are also ordinary words;
- a year after a preposition: ``in 2025``, ``during 2024`` (the year);
- a span counted back: ``today``, ``yesterday``, ``last week``, ``this month``,
  ``last year``, ``last weekend``, ``last Saturday``, ``three days ago``,
  ``two weeks ago``, ``a month ago``, ``2 years ago``.

A date or month without a year means its latest occurrence that began no later than the
reference time (February asked in May is this year's; asked in January, last year's).
Spans counted back need the reference time; without one they are left alone. A question
names nothing when none of these appears; the search then ranks as it would otherwise.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Protocol

from retold.models import Candidate

__all__ = ["NamedPeriod", "apply_periods", "asks_what_held", "meets", "named_periods"]

_MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august",
           "september", "october", "november", "december")
_MONTH_OF = {name: i + 1 for i, name in enumerate(_MONTHS)} | {
    name[:3]: i + 1 for i, name in enumerate(_MONTHS)} | {"sept": 9}
_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_NUMBER_WORDS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6,
                 "seven": 7, "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12}
# Words that make a month name beside them a date rather than a verb or a noun.
_CUES = ("in", "on", "since", "during", "before", "after", "until", "till", "by", "from", "of",
         "last", "this", "through", "around")

_M = r"(?P<month>" + "|".join(sorted(_MONTH_OF, key=len, reverse=True)) + r")\.?"
_DAY = r"(?P<day>[12]\d|3[01]|0?[1-9])(?:st|nd|rd|th)?"
_YEAR = r"(?P<year>(?:19|20)\d\d)"
_N = r"(?P<n>\d{1,3}|" + "|".join(_NUMBER_WORDS) + r")"

_PATTERNS = (
    ("iso_day", r"\b" + _YEAR + r"-(?P<mm>0[1-9]|1[0-2])-(?P<dd>0[1-9]|[12]\d|3[01])\b"),
    ("iso_month", r"\b" + _YEAR + r"-(?P<mm>0[1-9]|1[0-2])\b(?!-\d)"),
    ("day_month", r"\b" + _DAY + r"\s+(?:of\s+)?" + _M + r"(?:,?\s+" + _YEAR + r")?\b"),
    ("month_day", r"\b" + _M + r"\s+" + _DAY + r"\b(?!:)(?:,?\s+" + _YEAR + r")?(?!\s*(?:am|pm|%))"),
    ("month_range", r"\b(?:between|from)\s+" + _M.replace("month", "first")
                    + r"\s+(?:and|to|until|through)\s+" + _M + r"(?:,?\s+" + _YEAR + r")?\b"),
    ("month", r"\b(?:(?P<cue>" + "|".join(_CUES) + r")\s+)?(?:the\s+)?(?:(?P<part>early|mid|late)[-\s]+)?"
              + _M + r"(?:,?\s+" + _YEAR + r")?\b"),
    ("year", r"\b(?:in|during|since|of|from|before|after|until|by|through)\s+(?:the\s+year\s+)?"
             + _YEAR + r"\b"),
    ("ago", r"\b" + _N + r"\s+(?P<unit>day|week|month|year)s?\s+ago\b"),
    ("named_day", r"\b(?P<word>today|yesterday)\b"),
    ("last_this", r"\b(?P<which>last|this|past)\s+(?P<unit>week|weekend|month|year)\b"),
    ("last_weekday", r"\blast\s+(?P<weekday>" + "|".join(_WEEKDAYS) + r")\b"),
)
# Tried in this order; a later form never reads words an earlier one has read.
_FORMS = tuple((kind, re.compile(pattern, re.IGNORECASE)) for kind, pattern in _PATTERNS)


@dataclass(frozen=True, slots=True)
class NamedPeriod:
    """A span of time a question names: ``start`` included, ``end`` excluded (UTC), and
    the words it was read from."""

    start: datetime
    end: datetime
    text: str

    def contains(self, moment: datetime) -> bool:
        return self.start <= moment < self.end

    def overlaps(self, start: datetime, end: datetime | None) -> bool:
        """Whether a window from ``start`` to ``end`` (None: still open) meets this one."""
        return start < self.end and (end is None or end > self.start)

    def label(self) -> str:
        return f"{self.start.date().isoformat()} to {(self.end - timedelta(days=1)).date().isoformat()}"


def named_periods(text: str, reference: datetime | None) -> tuple[NamedPeriod, ...]:
    """Every period ``text`` names, in the order they appear; none read twice from the same
    words. ``reference`` is the time the question is asked at (UTC)."""
    found: list[tuple[int, NamedPeriod]] = []
    taken: list[tuple[int, int]] = []
    for kind, pattern in _FORMS:
        for match in pattern.finditer(text):
            span = match.span()
            if any(span[0] < end and start < span[1] for start, end in taken):
                continue
            period = _read(kind, match, reference)
            if period is not None:
                found.append((span[0], period))
                taken.append(span)
    return tuple(period for _, period in sorted(found, key=lambda pair: pair[0]))


def _read(kind: str, match: re.Match[str], reference: datetime | None) -> NamedPeriod | None:
    groups = match.groupdict()
    words = match.group(0).strip()
    year = int(groups["year"]) if groups.get("year") else None
    if kind == "iso_day":
        return _day(words, year, int(groups["mm"]), int(groups["dd"]), reference)
    if kind == "iso_month":
        return _month(words, year, int(groups["mm"]), reference)
    if kind in ("day_month", "month_day"):
        return _day(words, year, _MONTH_OF[groups["month"].lower()], int(groups["day"]), reference)
    if kind == "month_range":
        last = _month(words, year, _MONTH_OF[groups["month"].lower()], reference)
        if last is None:
            return None
        first = _MONTH_OF[groups["first"].lower()]
        start_year = last.start.year - (1 if first > last.start.month else 0)
        return NamedPeriod(datetime(start_year, first, 1, tzinfo=UTC), last.end, words)
    if kind == "month":
        if groups.get("cue") is None and groups.get("part") is None and year is None:
            return None  # a bare month name: as likely a word ("may") as a date
        return _month(words, year, _MONTH_OF[groups["month"].lower()], reference)
    if kind == "year":
        assert year is not None
        return NamedPeriod(datetime(year, 1, 1, tzinfo=UTC), datetime(year + 1, 1, 1, tzinfo=UTC), words)
    if reference is None:
        return None  # counted back from a time the question does not have
    today = datetime(reference.year, reference.month, reference.day, tzinfo=UTC)
    if kind == "ago":
        raw = groups["n"].lower()
        n = _NUMBER_WORDS[raw] if raw in _NUMBER_WORDS else int(raw)
        return _ago(words, groups["unit"].lower(), n, today)
    if kind == "named_day":
        day = today - timedelta(days=1 if groups["word"].lower() == "yesterday" else 0)
        return NamedPeriod(day, day + timedelta(days=1), words)
    if kind == "last_weekday":
        back = (today.weekday() - _WEEKDAYS.index(groups["weekday"].lower())) % 7 or 7
        day = today - timedelta(days=back)
        return NamedPeriod(day, day + timedelta(days=1), words)
    return _last_this(words, groups["which"].lower(), groups["unit"].lower(), today)


def _day(words: str, year: int | None, month: int, day: int,
         reference: datetime | None) -> NamedPeriod | None:
    def at(y: int) -> datetime | None:
        try:
            return datetime(y, month, day, tzinfo=UTC)
        except ValueError:  # 30 February, 31 April
            return None
    if year is None:
        if reference is None:
            return None
        start = at(reference.year)
        if start is not None and start > reference:
            start = at(reference.year - 1)
    else:
        start = at(year)
    return None if start is None else NamedPeriod(start, start + timedelta(days=1), words)


def _month(words: str, year: int | None, month: int, reference: datetime | None) -> NamedPeriod | None:
    if year is None:
        if reference is None:
            return None
        this_year = datetime(reference.year, month, 1, tzinfo=UTC) <= reference
        year = reference.year if this_year else reference.year - 1
    start = datetime(year, month, 1, tzinfo=UTC)
    return NamedPeriod(start, _add_months(start, 1), words)


def _ago(words: str, unit: str, n: int, today: datetime) -> NamedPeriod:
    """The unit-long period ``n`` units back: that day; the week around that day (people
    count weeks loosely); that calendar month or year."""
    if unit == "day":
        day = today - timedelta(days=n)
        return NamedPeriod(day, day + timedelta(days=1), words)
    if unit == "week":
        centre = today - timedelta(weeks=n)
        return NamedPeriod(centre - timedelta(days=3), centre + timedelta(days=4), words)
    if unit == "month":
        start = _add_months(datetime(today.year, today.month, 1, tzinfo=UTC), -n)
        return NamedPeriod(start, _add_months(start, 1), words)
    return NamedPeriod(datetime(today.year - n, 1, 1, tzinfo=UTC),
                       datetime(today.year - n + 1, 1, 1, tzinfo=UTC), words)


def _last_this(words: str, which: str, unit: str, today: datetime) -> NamedPeriod:
    """``this`` is the calendar period holding today; ``last``/``past`` the one before
    it (weeks start on Monday; a weekend is its Saturday and Sunday)."""
    back = 0 if which == "this" else 1
    if unit in ("week", "weekend"):
        monday = today - timedelta(days=today.weekday()) - timedelta(weeks=back)
        if unit == "weekend":
            saturday = monday + timedelta(days=5)
            return NamedPeriod(saturday, saturday + timedelta(days=2), words)
        return NamedPeriod(monday, monday + timedelta(weeks=1), words)
    if unit == "month":
        start = _add_months(datetime(today.year, today.month, 1, tzinfo=UTC), -back)
        return NamedPeriod(start, _add_months(start, 1), words)
    return NamedPeriod(datetime(today.year - back, 1, 1, tzinfo=UTC),
                       datetime(today.year - back + 1, 1, 1, tzinfo=UTC), words)


def _add_months(start: datetime, months: int) -> datetime:
    index = start.year * 12 + start.month - 1 + months
    return start.replace(year=index // 12, month=index % 12 + 1)


class Windowed(Protocol):
    """What the period factor reads of a record: a full Record or the store's RecordMeta."""

    @property
    def event_at(self) -> datetime: ...
    @property
    def valid_from(self) -> datetime | None: ...
    @property
    def valid_until(self) -> datetime | None: ...


def meets(record: Windowed, periods: Sequence[NamedPeriod]) -> bool:
    """Whether ``record`` belongs to a named period: its event time falls in one, or, for a
    record with a window of its own (a start or an end that was dated or that supersession
    set), that window overlaps one. A record without a window is placed by its event time
    alone: an open window from when a fact was said would meet every later period."""
    if record.valid_from is None and record.valid_until is None:
        return any(p.contains(record.event_at) for p in periods)
    start = record.valid_from or record.event_at
    return any(p.contains(record.event_at) or p.overlaps(start, record.valid_until) for p in periods)


def apply_periods(candidates: list[Candidate], records: Mapping[str, Windowed],
                  periods: Sequence[NamedPeriod], boost: float) -> list[str]:
    """Multiply the score of each candidate whose record meets a named period by ``boost``
    and re-sort (stable); the ids it lifted. Nothing is removed: a question's date is one
    reason among several, and an undated record may still be its answer."""
    lifted: list[str] = []
    if not periods or boost == 1.0:
        return lifted
    for candidate in candidates:
        record = records.get(candidate.record_id)
        if record is not None and meets(record, periods):
            candidate.score *= boost
            lifted.append(candidate.record_id)
    candidates.sort(key=lambda c: -c.score)
    return lifted


def asks_what_held(question: str, periods: Sequence[NamedPeriod], now: datetime) -> datetime | None:
    """The as-of time a question implies, or None: one named period, already over, in a
    question put in the past tense of "be" ("Who was the billing contact in February?")
    asks for the state at that period's close."""
    if len(periods) != 1 or periods[0].end > now or not _PAST_BE.search(question):
        return None
    return periods[0].end - timedelta(microseconds=1)


_PAST_BE = re.compile(r"\b(?:was|were)\b", re.IGNORECASE)
