"""The relevance gate: which candidates a search returns, and in what order.

The gate asks whether a candidate is relevant to what the question asks, not whether it
shares a word or a name with it. Query terms are split into names (identifiers, proper
nouns, entity aliases) and asked terms (the rest). Step 0: a question that names something
no readable record carries is about something the store does not know, and only a
near-duplicate cosine (``unknown_name_floor``) survives it. Step 1 keeps a candidate that
clears an absolute floor: the per-type dense floor (raised by ``name_only_margin`` when the
record shares the question's names but none of its asked terms, because a shared name
inflates the cosine whatever attribute is asked; by ``two_name_margin`` instead when it
carries two names that stand apart in the question, which few records share), or the
lexical floor on the asked terms (on the names when the question only names things); an
entity match counts as a name match, never as a pass of its own unless the question only
names things. Such a name-only record also passes when its cosine leads every other record
carrying the question's names by ``standout_margin`` (and reaches ``standout_floor``): the
question picked it out of that entity's records; so does one whose cosine with the names
taken out of both sides (``Candidate.beyond_names``) reaches ``beyond_names_floor`` and
leads the others' by ``beyond_names_margin``, and one that is the only record carrying
them to hold a word of what is asked (its stem three letters or more), when its cosine
reaches ``standout_floor`` (:mod:`retold.retrieve.standouts`). A record reached on a link
(``Candidate.via``: it is about what a candidate mentions) passes when that candidate
passed and it holds an asked word the candidate does not, and ranks right after it
(``follow_links``). Companions: once
something passed, a candidate within ``companion_margin`` of the best passing cosine is
kept too, and ranks by its dense vote alone times ``companion_weight``
(:func:`dense_vote_score`), as does a record that passed only on two names: the names it
shares earned its other votes, not what is asked; a companion closer to the question than
every pass moves up to right after the top record, unless a pass holds asked words but
none of the question's names (the question may name the wrong person). Step 2 drops
survivors below ``relative_floor`` times the best fused score among survivors with the
same number of channels (0 disables it). Every dropped candidate carries the step and
floor that dropped it, so a logged search can be re-decided with other floors
(:mod:`retold.retrieve.replay`; ``docs/decisions.md``, "The gate judges what is asked", "A
record the question picks out of its entity's records", "An asked word one record holds",
"A second hop through entity links", "Two names of the question", "A companion closer
than every pass" and "What a record says beyond the question's names").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from retold.config import AutoGateConfig, DenseFloors, GateConfig
from retold.models import Candidate, LexicalMatch, QueryShape
from retold.retrieve.pass_order import after_anchors, closer_up, words_first
from retold.retrieve.standouts import asked_standouts, asked_words, beyond_standouts, standouts

__all__ = ["GateFloors", "GateResult", "RecordKind", "dense_vote_score", "floors_for", "gate"]


@dataclass(frozen=True)
class RecordKind:
    """What the gate needs to know about a candidate's record."""

    type: str
    source_kind: str


@dataclass(frozen=True)
class GateFloors:
    """One complete set of floors: the normal gate or the ``auto`` gate."""

    dense_floor: DenseFloors
    lexical_min_term_fraction: float
    lexical_min_matched_terms: int
    relative_floor: float
    exclude_source_kinds: tuple[str, ...] = ()
    name_only_margin: float = 0.0
    two_name_margin: float = 0.0
    unknown_name_floor: float = 1.0
    standout_margin: float = 0.0
    standout_floor: float = 1.0
    companion_margin: float = 0.0
    companion_weight: float = 1.0
    nameless_lexical_floor: float = 0.0
    nameless_lexical_terms: int = 0
    follow_links: bool = False
    beyond_names_floor: float = 1.0
    beyond_names_margin: float = 0.0
    policy_only: bool = False  # cross_encoder_only: the reranker alone judges relevance

    def dense_for(self, kind: RecordKind) -> tuple[float, str]:
        """The dense floor and its label: session summaries, long and broad, have their own."""
        if kind.source_kind == "session_summary":
            return self.dense_floor.session_summary, "session_summary"
        return float(getattr(self.dense_floor, kind.type)), kind.type

    def as_dict(self) -> dict[str, Any]:
        return {
            "dense_floor": {k: getattr(self.dense_floor, k)
                            for k in ("semantic", "episodic", "procedural", "session_summary")},
            "lexical_min_term_fraction": self.lexical_min_term_fraction,
            "lexical_min_matched_terms": self.lexical_min_matched_terms,
            "relative_floor": self.relative_floor,
            "exclude_source_kinds": list(self.exclude_source_kinds),
            "name_only_margin": self.name_only_margin,
            "two_name_margin": self.two_name_margin,
            "unknown_name_floor": self.unknown_name_floor,
            "standout_margin": self.standout_margin,
            "standout_floor": self.standout_floor,
            "companion_margin": self.companion_margin,
            "companion_weight": self.companion_weight,
            "nameless_lexical_floor": self.nameless_lexical_floor,
            "nameless_lexical_terms": self.nameless_lexical_terms,
            "follow_links": self.follow_links,
            "beyond_names_floor": self.beyond_names_floor,
            "beyond_names_margin": self.beyond_names_margin,
        }


def floors_for(cfg: GateConfig, trigger: str) -> GateFloors:
    """The floors a search uses: ``gate.auto`` replaces every floor for host-issued searches."""
    source: GateConfig | AutoGateConfig = cfg.auto if trigger == "auto" else cfg
    excluded = cfg.auto.exclude_source_kinds if trigger == "auto" else ()
    return GateFloors(source.dense_floor, source.lexical_min_term_fraction,
                      source.lexical_min_matched_terms, source.relative_floor, tuple(excluded),
                      source.name_only_margin, source.two_name_margin, source.unknown_name_floor,
                      source.standout_margin, source.standout_floor, source.companion_margin,
                      source.companion_weight, source.nameless_lexical_floor,
                      source.nameless_lexical_terms, source.follow_links, source.beyond_names_floor,
                      source.beyond_names_margin)


@dataclass
class GateResult:
    kept: list[Candidate]
    gated_out: list[tuple[str, str]]  # (record_id, reason)
    empty_reason: str | None
    by_dense_vote: frozenset[str] = frozenset()  # kept ids ranked by dense_vote_score


def _channels(c: Candidate) -> int:
    return sum(hit is not None for hit in (c.dense, c.lexical, c.entity))


def _step1(
    c: Candidate, kind: RecordKind, floors: GateFloors, shape: QueryShape
) -> tuple[str | None, list[str]]:
    """(why it passed, or None) and the floors it missed."""
    missed: list[str] = []
    if floors.policy_only:
        return "the source-kind policy (the cross-encoder judges relevance)", missed
    floor, label = floors.dense_for(kind)
    if shape.unknown_names:
        names = ", ".join(shape.unknown_names)
        if c.dense is not None and c.dense.score >= floors.unknown_name_floor:
            return (f"dense {c.dense.score:.3f} >= {floors.unknown_name_floor:.2f}"
                    f" (unknown name {names})"), missed
        return None, [f"the question names {names}, which no readable record carries"]
    match = c.lexical_terms
    names_hit = _names_hit(c)
    asked_hit = match.asked_matched if match is not None else 0
    if shape.asks and names_hit and asked_hit == 0:
        if _groups_carried(match, shape) >= 2:
            floor, label = floor + floors.two_name_margin, label + ", shares only names, two of them"
        elif floors.name_only_margin:
            floor, label = floor + floors.name_only_margin, label + ", shares only a name"
    if c.dense is not None:
        if c.dense.score >= floor:
            return f"dense {c.dense.score:.3f} >= {floor:.2f} ({label})", missed
        missed.append(f"dense {c.dense.score:.3f} < {floor:.2f} ({label})")
    else:
        missed.append(f"no dense match >= {floor:.2f} ({label})")
    if match is not None and match.total_terms:
        passed, detail = _lexical(match, floors)
        if passed and shape.asks and match.name_terms and not names_hit:
            # The question names someone or something this record never mentions: words
            # it shares about what is asked ("travel" in Meridian Travel, "deploy" of
            # another project) say little unless the meaning is close too.
            # Unless it holds several of them: three asked words in common ("startup pitch
            # night") describe the one thing asked about, only someone else doing it, and
            # such a record rarely makes the dense list at all.
            cosine = c.dense.score if c.dense is not None else None
            many = 0 < floors.nameless_lexical_terms <= match.asked_matched
            if many:
                detail += f" without the question's names, {match.asked_matched} of them"
            elif cosine is None or cosine < floors.nameless_lexical_floor:
                passed = False
                detail += (f" but none of the question's names, and dense "
                           f"{'-' if cosine is None else f'{cosine:.3f}'} < "
                           f"{floors.nameless_lexical_floor:.2f}")
        if passed:
            return detail, missed
        missed.append(detail)
    else:
        missed.append("no lexical match")
    if c.entity is not None and not shape.asks:
        return f"entity match {c.entity_id} (the question only names things)", missed
    missed.append("entity match without what is asked" if c.entity is not None else "no entity match")
    return None, missed


def _names_hit(c: Candidate) -> bool:
    """Whether the record carries a name of the question (or its resolved entity)."""
    return c.entity is not None or (c.lexical_terms is not None and c.lexical_terms.names_matched > 0)


def _about_someone_else(c: Candidate) -> bool:
    """Whether a passing record holds asked words but none of the names the question has."""
    match = c.lexical_terms
    return (match is not None and bool(match.name_terms) and not _names_hit(c)
            and match.asked_matched > 0)


def _lexical(match: LexicalMatch, floors: GateFloors) -> tuple[bool, str]:
    """The lexical floor on the asked terms, or on the names when nothing else is asked."""
    if match.asked_terms:
        matched, total, what = match.asked_matched, match.asked_terms, "asked terms"
    else:
        matched, total, what = match.names_matched, match.name_terms, "names"
    fraction = matched / total if total else 0.0
    least = max(1, floors.lexical_min_matched_terms)
    detail = f"lexical {matched}/{total} {what}"
    if fraction >= floors.lexical_min_term_fraction and matched >= min(least, total):
        return True, detail
    if fraction < floors.lexical_min_term_fraction:
        detail += f" < {floors.lexical_min_term_fraction:.2f}"
    if matched < min(least, total):
        detail += f", {matched} matched < {min(least, total)}"
    return False, detail


def _groups_carried(match: LexicalMatch | None, shape: QueryShape) -> int:
    """How many of the question's separate names the record carries.

    Every record of an entity shares its name, so one shared name says little about what
    is asked. Two names that stand apart in the question (a person and a city, two people)
    are shared by few records, and those few are about what the question joins them by.
    """
    if match is None or len(shape.name_groups) < 2:
        return 0
    carried = {term.value for term in match.terms if term.is_name}
    return sum(1 for group in shape.name_groups if carried.intersection(group))


def _passed_on_two_names(c: Candidate, kind: RecordKind, floors: GateFloors, shape: QueryShape) -> bool:
    """Whether the record passed only because it carries two of the question's names: it
    holds none of the asked terms and its cosine is under the one-name floor."""
    match = c.lexical_terms
    if c.dense is None or match is None or match.asked_matched or _groups_carried(match, shape) < 2:
        return False
    return c.dense.score < floors.dense_for(kind)[0] + floors.name_only_margin


def _links(passed: Sequence[Candidate], failed: Sequence[Candidate],
           floors: GateFloors) -> dict[str, tuple[str, str]]:
    """Failed records reached from a passing record's mention: record id -> (the passing
    record's id, why).

    "What does Ayla's brother do for work?" passes "Ayla's brother is Quentin", which holds
    "brother" and not "work"; "Quentin works as a firefighter" is about the person it
    mentions and holds "work". A record reached that way passes when it holds an asked
    word the passing record does not: it answers the part of the question that record
    leaves open. One that holds nothing new adds nothing to the answer.
    """
    if not floors.follow_links:
        return {}
    anchors = {c.record_id: c for c in passed}
    out: dict[str, tuple[str, str]] = {}
    for c in failed:
        anchor = anchors.get(c.via) if c.via is not None else None
        if anchor is None:
            continue
        new = asked_words(c.via_terms) - asked_words(anchor.lexical_terms)
        if new:
            out[c.record_id] = (anchor.record_id, (
                f"a link from {anchor.record_id}: about what that record mentions, holding "
                f"asked words it does not ({', '.join(sorted(new))})"))
    return out


def _best_pass_cosine(passed: Sequence[Candidate], on_words: frozenset[str]) -> float | None:
    """The highest cosine among the passes, or None when none has one. A record that passed
    on asked words alone, about someone the question does not name, says nothing about how
    close the question's own answer would be, so it does not count."""
    cosines = [c.dense.score for c in passed if c.dense is not None and c.record_id not in on_words]
    return max(cosines) if cosines else None


def _companions(best: float | None, failed: Sequence[Candidate], floors: GateFloors) -> list[Candidate]:
    """Failed candidates whose cosine is within ``companion_margin`` of ``best``, the best
    passing cosine (:func:`_best_pass_cosine`).

    Once the question is known to have an answer, a record about as close to it as that
    answer is likely a second answer (another film seen with the same friend), not noise.
    """
    if floors.companion_margin <= 0 or best is None:
        return []
    out = [c for c in failed if c.dense is not None and c.dense.score >= best - floors.companion_margin]
    for c in out:
        assert c.dense is not None
        c.gate_reason = (f"passed as a companion: dense {c.dense.score:.3f} within "
                         f"{floors.companion_margin:.2f} of the best pass {best:.3f}")
    return out


def _on_words_alone(c: Candidate, floors: GateFloors) -> bool:
    """Whether a record that passed step 1 got through on ``nameless_lexical_terms``: it
    holds none of the question's names and its cosine is under ``nameless_lexical_floor``."""
    match = c.lexical_terms
    if (floors.nameless_lexical_terms <= 0 or floors.policy_only or match is None
            or not match.name_terms or _names_hit(c) or match.asked_matched < floors.nameless_lexical_terms):
        return False
    return c.dense is None or c.dense.score < floors.nameless_lexical_floor


def dense_vote_score(c: Candidate, floors: GateFloors) -> float:
    """Where a companion, or a record sharing only the question's names, ranks: its dense
    vote alone, times ``companion_weight``, times its freshness.

    A companion failed every floor on its own, and a record that carries two of the
    question's names but none of what it asks may pass only on the lower ``two_name_margin``.
    Their lexical and entity votes came from the names, which a short record about the
    two ("Tobias's sister is Mateo") collects best, so only the cosine says how close
    they are to what is asked; the weight keeps a pass that is about as close ahead.
    """
    multiplier = c.freshness_multiplier if c.freshness_multiplier is not None else 1.0
    return c.dense_vote * floors.companion_weight * multiplier


def gate(
    candidates: Sequence[Candidate],
    kinds: Mapping[str, RecordKind],
    floors: GateFloors,
    shape: QueryShape | None = None,
) -> GateResult:
    """Apply the steps to candidates in score order; sets ``gate_reason``.

    ``kept`` comes back in rank order: by ``score``, those in ``by_dense_vote`` by
    :func:`dense_vote_score`; then each companion closer than every pass right after the
    top record, each linked record right after the record it came from, and each pass on
    asked words alone ahead of the passes holding fewer of them.
    """
    shape = shape or QueryShape()
    following: set[str] = set()
    linked: dict[str, str] = {}  # a record passed on a link -> the record it was reached from
    gated_out: list[tuple[str, str]] = []
    step1: list[Candidate] = []
    failed: list[Candidate] = []
    best_missed: list[str] | None = None
    closer: list[Candidate] = []  # companions closer to the question than every pass
    for c in candidates:
        kind = kinds[c.record_id]
        if kind.source_kind in floors.exclude_source_kinds:
            c.gate_reason = f"excluded source kind {kind.source_kind} (host-issued search)"
            continue
        passed, missed = _step1(c, kind, floors, shape)
        if passed is None:
            c.gate_reason = "step 1: " + "; ".join(missed)
            failed.append(c)
            if best_missed is None:
                best_missed = missed  # candidates arrive best first
        else:
            c.gate_reason = f"passed on {passed}"
            step1.append(c)
    on_words = frozenset(c.record_id for c in step1 if _on_words_alone(c, floors))
    if shape.asks and not shape.unknown_names and not floors.policy_only:
        # Where two rules pass a record, the reason names the later one.
        leads = (beyond_standouts(candidates, failed, floors) | asked_standouts(candidates, failed, floors)
                 | standouts(candidates, failed, floors))
        for c in failed:
            if c.record_id in leads:
                c.gate_reason = f"passed on {leads[c.record_id]}"
        passed_ids = {c.record_id for c in step1} | set(leads)
        step1 = [c for c in candidates if c.record_id in passed_ids]
        failed = [c for c in failed if c.record_id not in leads]
        links = _links(step1, failed, floors)
        linked = {rid: anchor for rid, (anchor, _) in links.items()}
        for c in failed:
            if c.record_id in links:
                c.gate_reason = f"passed on {links[c.record_id][1]}"
        failed = [c for c in failed if c.record_id not in linked]
        best = _best_pass_cosine(step1, on_words)
        followers = _companions(best, failed, floors)
        # Its cosine beats every record that let it through: it is as likely an answer as
        # they are, and its dense vote alone would rank it below all of them.
        if not any(_about_someone_else(c) for c in step1):
            closer = [c for c in followers
                      if best is not None and c.dense is not None and c.dense.score > best]
        following = {c.record_id for c in followers}
        following |= {c.record_id for c in step1
                      if _passed_on_two_names(c, kinds[c.record_id], floors, shape)}
        step1 += followers + [c for c in candidates if c.record_id in linked]
        failed = [c for c in failed if c.record_id not in following]
    dropped = {c.record_id for c in failed}
    gated_out += [(c.record_id, c.gate_reason or "") for c in candidates
                  if c.record_id in dropped or kinds[c.record_id].source_kind in floors.exclude_source_kinds]
    tops: dict[int, float] = {}
    for c in step1:
        tops[_channels(c)] = max(tops.get(_channels(c), 0.0), c.score)
    kept: list[Candidate] = []
    for c in step1:
        top = tops[_channels(c)]
        # An entity hit, or a record reached on a link, has no fused score of its own to compare.
        if c.entity is None and c.record_id not in linked and c.score < floors.relative_floor * top:
            c.gate_reason = (f"step 2: fused {c.score:.5f} < {floors.relative_floor:.2f} x "
                             f"{top:.5f} ({_channels(c)}-channel top)")
            gated_out.append((c.record_id, c.gate_reason))
        else:
            kept.append(c)
    if following:  # stable: equal scores keep candidate order
        kept.sort(key=lambda c: -(dense_vote_score(c, floors) if c.record_id in following else c.score))
    if closer:
        kept = closer_up(kept, frozenset(c.record_id for c in closer))
    if linked:
        kept = after_anchors(kept, linked)
    if on_words:
        kept = words_first(kept, on_words)
    empty_reason = None
    if not kept:
        if best_missed is not None:
            empty_reason = "best candidate missed every floor: " + "; ".join(best_missed)
        elif gated_out:
            empty_reason = "every candidate was dropped: " + gated_out[0][1]
        else:
            empty_reason = "no candidate from any channel among readable records"
    return GateResult(kept, gated_out, empty_reason, frozenset(following))
