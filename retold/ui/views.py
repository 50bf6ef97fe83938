"""What each inspector page shows and what each of its buttons does, for one viewer,
through the same parts the tools and the host API use: nothing here writes SQL, and a
principal's view of a record is built by the code that answers its ``memory_get``.

A principal reads exactly the scopes ``memory_search`` and ``memory_get`` would give it
(grants and membership included); a record of any other scope answers as missing, so a
page never tells a principal that such a record exists.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, get_args

from retold.activation.activator import Resolution
from retold.config import PerTrigger
from retold.errors import RetoldError
from retold.ingest.evidence import turn_of
from retold.ingest.revision import RevisionError
from retold.models import Entity, Principal, Record, Scope, SearchRequest
from retold.policy.grants import readable_scopes, writable_scopes
from retold.retrieve.replay import replay
from retold.retrieve.trace import logged_dense_score
from retold.runtime import Runtime
from retold.store.activation import ActivationRow
from retold.store.browse import BrowseFilter, ScopeCounts
from retold.store.event_log import EventQuery
from retold.store.grants import Grant
from retold.store.members import Member
from retold.store.session_states import SessionQuery, SessionStatus
from retold.ui.access import Viewer

__all__ = ["ACTIONS", "RESOLUTIONS", "ActionOutcome", "Inspector", "RecordsPage", "SearchView"]

ACTIONS = ("forget", "restore", "pin", "unpin", "confirm")
ACCESS_LOG_ROWS = 20
CONTEXT_TURNS = 2  # turns shown on each side of the quoted one
RESOLUTIONS = get_args(Resolution)


@dataclass(frozen=True)
class RecordsPage:
    """One page of a records list and the key of the next one (None on the last)."""

    records: list[Record]
    next_before: int | None
    scopes: list[Scope]


@dataclass(frozen=True)
class Vote:
    """One channel's say on one candidate: what it added to the fused sum (``part``), the
    candidate's rank in that channel, and what the channel saw (``score``: the dense
    channel's score, the lexical BM25; ``note``: the lexical terms matched, the entity's
    name; ``title``: the entity's id)."""

    part: float | None
    rank: int
    score: float | None = None
    note: str = ""
    title: str = ""


@dataclass(frozen=True)
class CandidateRow:
    """One candidate of a search as the search itself scored it: ``score`` is the value the
    tool returned (for a record the model reads) or ranked it by, ``fused`` the channels'
    sum before freshness and confidence; ``left_out`` says why the model does not read it."""

    id: str
    content: str | None
    score: float | None
    fused: float | None
    fused_rank: int | None
    freshness: float | None
    confidence: float | None
    period: float | None  # the lift for meeting a period the question names
    via: str | None
    link_part: float | None  # what the link hop from ``via`` added to the fused sum
    dense: Vote | None
    lexical: Vote | None
    entity: Vote | None
    returned: bool
    left_out: str | None


@dataclass(frozen=True)
class SearchView:
    """One search run from the search page: what the model would read, the decision to
    answer or abstain with its signals, and every candidate with each channel's say, the
    records the model reads first and in its order."""

    principal: Principal
    trigger: str
    search_id: str
    rendered: str
    empty_reason: str | None
    decision: dict[str, Any]
    candidates: list[CandidateRow]
    replayed: list[dict[str, Any]]  # the same logged search decided again at other thresholds


@dataclass(frozen=True)
class ActionOutcome:
    """What a button did: ``code`` is None on success, else the tool's error code."""

    message: str
    code: str | None = None

    @property
    def ok(self) -> bool:
        return self.code is None


class Inspector:
    """The pages' reads and actions over one runtime."""

    def __init__(self, rt: Runtime, page_size: int) -> None:
        self.rt, self.page_size = rt, page_size

    def readable(self, viewer: Viewer) -> list[Scope] | None:
        """The scopes ``viewer`` reads; None for an operator (every scope)."""
        if viewer.principal is None:
            return None
        return readable_scopes(self.rt.store, viewer.principal)

    def scopes(self, viewer: Viewer) -> list[ScopeCounts]:
        """Counts for every scope the viewer reads, empty ones included for a principal."""
        readable = self.readable(viewer)
        counted = {c.scope: c for c in self.rt.store.scope_counts(readable)}
        if readable is None:
            return list(counted.values())
        return [counted.get(s) or ScopeCounts(s, {}, {}, 0) for s in readable]

    def records(self, viewer: Viewer, kept: BrowseFilter, scope: Scope | None,
                before: int | None) -> RecordsPage:
        readable = self.readable(viewer)
        if scope is not None:
            shown: list[Scope] | None = [scope] if readable is None or scope in readable else []
        else:
            shown = readable
        found = self.rt.store.browse_records(shown, kept, before_seq=before, limit=self.page_size + 1)
        more = len(found) > self.page_size
        page = found[:self.page_size]
        return RecordsPage(page, page[-1].seq if more and page else None,
                           readable if readable is not None else self.rt.store.record_scopes())

    def record(self, viewer: Viewer, record_id: str) -> dict[str, Any] | None:
        """The record page's content: the tool's view of the record and, for an operator,
        its whole event trail with actors and payloads; None for missing or unreadable."""
        view = self.rt.tools.describe(record_id, viewer.principal)
        if view is None:
            return None
        p = viewer.principal
        # The subject by name; the tool's view names only an entity the viewer may read.
        view["subject_name"] = next((e["canonical"] for e in view.get("entities") or []
                                     if e["id"] == view.get("subject_entity_id")), None)
        if p is None:
            view["events"] = self.rt.store.events(record_id=view["id"])
        view["returned_by"] = self.rt.store.searches_returning(
            view["id"], principal=None if p is None else (p.agent_id, p.user_id), limit=ACCESS_LOG_ROWS)
        view["context"] = [] if view.get("tombstone") else self._context(view.get("source_ref"), p)
        row = self.rt.store.activation_of(view["id"])
        view["activation"] = None if row is None else {
            "activation": row.activation, "category": row.category, "rule": row.rule, "reason": row.reason,
            "decided_by": row.decided_by}
        stored = self.rt.store.get_record(view["id"])
        # The class its tenant's pack put it in, and whether its text was masked before it
        # was embedded and indexed: what explains a record that search finds by less.
        view["sensitivity"] = None if stored is None else {
            "name": stored.sensitivity, "redacted": stored.redacted_content is not None}
        return view

    def _context(self, ref: str | None, principal: Principal | None) -> list[dict[str, Any]]:
        """The turns around the one a record quotes, as retention left them, when the viewer
        may read that session: an operator, or the agent and user who held it (a record
        in a shared scope may quote another user's conversation)."""
        where = turn_of(ref)
        session = None if where is None else self.rt.store.get_session(where[0])
        if where is None or session is None:
            return []
        if principal is not None and (session.agent_id, session.user_id) != (principal.agent_id,
                                                                              principal.user_id):
            return []
        return [{"turn": t.turn, "role": t.role, "content": t.content, "quoted": t.turn == where[1]}
                for t in self.rt.store.turns(where[0]) if abs(t.turn - where[1]) <= CONTEXT_TURNS]

    def search(self, viewer: Viewer, query: str, principal: Principal, trigger: str,
               answer_at: tuple[float, ...] = (), as_of: datetime | None = None) -> SearchView:
        """Run ``query`` as ``principal`` (a principal viewer can only search as itself)
        through the tools' search, then read its log row for the channels' votes; for each
        threshold in ``answer_at``, also decide the logged search again there. ``as_of``
        searches what was valid then, as the tool's ``as_of`` does.

        The table is the search's own account, never a recomputation: the records the tool
        returned come first, in its order and with its scores, and the rest follow as the
        search ranked them, so the page and the block the model reads cannot disagree."""
        if viewer.principal is not None and principal != viewer.principal:
            raise PermissionError("a principal's token searches only as that principal")
        result = self.rt.tools.search(principal, SearchRequest(queries=[query], trigger=trigger,  # type: ignore[arg-type]
                                                               as_of=as_of))
        self.rt.flush_search_log()
        row = self.rt.store.search_log_row(str(result["search_id"])) or {}
        returned = {str(r["id"]): float(r["score"]) for r in result["results"]}
        candidates = _candidates(row, returned)
        known = {r.id: r for r in self.rt.store.records([c.id for c in candidates])}
        names = self._entity_names(viewer, {c.entity.title for c in candidates if c.entity is not None})
        candidates = [replace(c, content=_live_content(known.get(c.id)),
                              entity=c.entity and replace(c.entity, note=names.get(c.entity.title, "")))
                      for c in candidates]
        replayed = []
        gate = self.rt.config.retrieval.gate
        for threshold in answer_at if row else ():
            again = replay(row, replace(gate, answer_at=PerTrigger(threshold, threshold)))
            replayed.append({"answer_at": threshold, "answered": again.decision.answered,
                             "kept": len(again.result.kept)})
        return SearchView(principal, trigger, str(result["search_id"]), str(result["rendered"]),
                          result.get("empty_reason"), dict(result["decision"]), candidates, replayed)

    def _entity_names(self, viewer: Viewer, entity_ids: set[str]) -> dict[str, str]:
        """The names of those entities the viewer reads, by id."""
        readable = self.readable(viewer)
        found = (self.rt.store.get_entity(i) for i in sorted(entity_ids))
        return {e.id: e.canonical for e in found
                if e is not None and (readable is None or e.scope in readable)}

    def entities(self, viewer: Viewer, kinds: tuple[str, ...] = ()) -> list[Entity]:
        """The viewer's readable entities by name, ``page_size`` at most."""
        ids = self.rt.store.browse_entity_ids(self.readable(viewer), self.page_size, kinds)
        return [e for e in (self.rt.store.get_entity(i) for i in ids) if e is not None]

    def entity(self, viewer: Viewer, entity_id: str) -> tuple[Entity, list[Entity], Entity | None] | None:
        """One entity, those merged into it and the one it was merged into (when readable),
        when the viewer reads its scope."""
        readable = self.readable(viewer)
        entity = self.rt.store.get_entity(entity_id)
        if entity is None or readable is not None and entity.scope not in readable:
            return None
        merged = [e for e in (self.rt.store.get_entity(i) for i in self.rt.store.merged_from(entity.id))
                  if e is not None and (readable is None or e.scope in readable)]
        into = self.rt.store.get_entity(entity.merged_into) if entity.merged_into else None
        if into is not None and readable is not None and into.scope not in readable:
            into = None
        return entity, merged, into

    def access(self, viewer: Viewer) -> tuple[list[Grant], list[Member]]:
        """Grants and memberships: every one for an operator; a principal's own agent's
        grants and its user's memberships."""
        if viewer.principal is None:
            return self.rt.store.grants_for(None), self.rt.store.members_of(None)
        p = viewer.principal
        members = [m for s in self.rt.store.member_scopes(p.user_id) for m in self.rt.store.members_of(s)
                   if m.user_id == p.user_id]
        return self.rt.store.grants_for(p.agent_id), members

    def change_access(self, viewer: Viewer, change: str, form: dict[str, str]) -> ActionOutcome:
        """Grant, revoke, add or remove a member through the host API, as the operator;
        a principal's token changes no access."""
        if viewer.principal is not None:
            return ActionOutcome("only an operator's token changes grants and members", "forbidden")
        try:
            scope = Scope.parse(form.get("scope", ""))
            host, agent, user = self.rt.host, form.get("agent", ""), form.get("user", "")
            if change == "grant":
                host.grant(agent, scope, read=True, write=form.get("write") == "yes", actor=viewer.name)
                return ActionOutcome(f"granted {agent} {scope}")
            if change == "revoke":
                done = host.revoke(agent, scope, actor=viewer.name)
                return ActionOutcome(f"revoked {agent} {scope}" if done else "there was no such grant")
            if change == "add_member":
                done = host.add_member(scope, user, actor=viewer.name)
                return ActionOutcome(f"{user} is a member of {scope}" if done else "already a member")
            if change == "remove_member":
                done = host.remove_member(scope, user, actor=viewer.name)
                return ActionOutcome(f"{user} left {scope}" if done else "was not a member")
        except (RetoldError, ValueError) as err:
            return ActionOutcome(str(err), "invalid_input")
        return ActionOutcome(f"unknown change {change!r}", "invalid_input")

    def sessions(self, viewer: Viewer, limit: int) -> list[SessionStatus]:
        """The most recently started sessions (a principal's own only), oldest first."""
        p = viewer.principal
        query = SessionQuery(user_id=p.user_id if p else None, agent_id=p.agent_id if p else None,
                             limit=limit)
        lease = timedelta(seconds=self.rt.config.ingestion.extraction_lease_seconds)
        return self.rt.store.session_statuses(query, self.rt.clock.now() - lease)

    def session(self, viewer: Viewer, session_id: str) -> dict[str, Any] | None:
        """One session: its row, its turns as retention left them, the profile block it
        started with, the events that name it (extraction runs, with the models, counts,
        records they wrote and hosted calls and tokens they spent, and failures). A
        principal sees its own sessions only."""
        row = self.rt.store.get_session(session_id)
        p = viewer.principal
        if row is None or p is not None and (row.agent_id, row.user_id) != (p.agent_id, p.user_id):
            return None
        events = self.rt.store.find_events(EventQuery(session_id=session_id, limit=100))
        written = [str(o.get("record_id")) for e in events if e.kind == "extraction.run"
                   for o in e.payload.get("outcomes") or [] if isinstance(o, dict) and o.get("record_id")]
        spent = {"calls": 0, "input_tokens": 0, "output_tokens": 0}
        for e in events:
            for stage in (e.payload.get("hosted") or {}).values() if e.kind == "extraction.run" else ():
                for key in spent:
                    spent[key] += int(stage.get(key, 0))
        return {"row": row, "turns": self.rt.store.turns(session_id), "events": events,
                "profile": self.rt.store.profile_block(session_id),
                "written": self.rt.store.records(written), "spent": spent}

    def reviews(self, viewer: Viewer, limit: int) -> list[tuple[ActivationRow, Record]]:
        """Records waiting for a person's activation decision, in the scopes the viewer reads."""
        readable = self.readable(viewer)
        queue = self.rt.store.review_queue(self.rt.clock.now(), limit=limit)
        return [(row, record) for row, record in queue if readable is None or record.scope in readable]

    def resolve(self, viewer: Viewer, record_id: str, resolution: str, reason: str) -> ActionOutcome:
        """Close one review through the activator, as ``retold reviews resolve`` does; a
        principal may resolve only in a scope it may write."""
        record = self.rt.store.get_record(record_id)
        allowed = None if viewer.principal is None else writable_scopes(self.rt.store, viewer.principal)
        if record is None or allowed is not None and record.scope not in allowed:
            return ActionOutcome(f"no review for {record_id}", "not_found")
        if resolution not in RESOLUTIONS:
            return ActionOutcome(f"resolve as one of {', '.join(RESOLUTIONS)}", "invalid_input")
        if not reason.strip():
            return ActionOutcome("a reason is required", "invalid_input")
        try:
            row = self.rt.activator.resolve(record_id, resolution, resolver=viewer.name,  # type: ignore[arg-type]
                                            reason=reason)
        except RetoldError as err:
            return ActionOutcome(str(err), getattr(err, "code", "invalid_input"))
        return ActionOutcome(f"resolved as {resolution}: activation {row.activation}")

    def act(self, viewer: Viewer, record_id: str, action: str, reason: str,
            content: str = "") -> ActionOutcome:
        """Run one button: a principal's through the memory tools, exactly as its agent
        would call them; an operator's through the reviser and the host API, recorded
        under the operator's name. ``supersede`` replaces the content with ``content``."""
        if action not in (*ACTIONS, "supersede"):
            return ActionOutcome(f"unknown action {action!r}", "invalid_input")
        if viewer.principal is not None:
            payload = {"id": record_id, "reason": reason}
            if action == "supersede":
                payload["content"] = content
            if action == "forget":
                answer = self.rt.tools.call("memory_forget", viewer.principal, payload)
            else:
                answer = self.rt.tools.call("memory_revise", viewer.principal, {**payload, "action": action})
            if "error" in answer:
                error = answer["error"]
                return ActionOutcome(str(error["message"]), str(error["code"]))
            return ActionOutcome(f"{action}: done")
        return self._operator_act(viewer, record_id, action, reason)

    def _operator_act(self, viewer: Viewer, record_id: str, action: str, reason: str) -> ActionOutcome:
        record = self.rt.store.get_record(record_id)
        if record is None:
            return ActionOutcome(f"no memory {record_id}", "not_found")
        if action == "supersede":
            # New content needs a source the write path can weigh (an agent's session or
            # a user's words); an operator has neither, so a correction goes through the
            # principal whose memory it is.
            return ActionOutcome("an operator does not write memory: correct it with the token of the"
                                 " agent and user it belongs to", "invalid_input")
        if not reason.strip():
            return ActionOutcome("a reason is required", "invalid_input")
        try:
            if action in ("pin", "unpin"):
                changed = getattr(self.rt.host, action)(record_id, reason, actor=viewer.name)
                return ActionOutcome(f"{action}: {'done' if changed else 'nothing to change'}")
            if action == "restore":
                change = self.rt.reviser.restore(viewer.name, record, reason)
            else:
                change = self.rt.reviser.change_status(viewer.name, record, action, reason)  # type: ignore[arg-type]
        except RevisionError as err:
            return ActionOutcome(err.message, err.code)
        except RetoldError as err:
            return ActionOutcome(str(err), "invalid_input")
        return ActionOutcome(f"{action}: {change.previous_status} -> {change.status}")


def _live_content(record: Record | None) -> str | None:
    return record.content if record is not None and record.status != "deleted" else None


def _candidates(row: dict[str, Any], returned: dict[str, float]) -> list[CandidateRow]:
    """Every candidate of a logged search: ``returned`` (the tool's results, id to score,
    in its order) first, then the rest by the score the search ranked them with, each with
    every channel's vote and why the model does not read it."""
    def load(name: str) -> Any:
        value = row.get(name)
        return json.loads(value) if isinstance(value, str) else value

    fused = {f["id"]: f for f in load("fused") or []}
    dense = {d["id"]: d for d in load("dense") or []}
    lexical = {h["id"]: h for h in (load("lexical") or {}).get("hits", [])}
    entity = {e["id"]: e for e in load("entity") or []}
    freshness = {f["id"]: f["multiplier"] for f in load("freshness") or []}
    flags = load("config_flags") or {}
    weighed = flags.get("confidence", True)
    lift = flags.get("period_lifted") or {}
    lifted = set(lift.get("ids", [])) if isinstance(lift, dict) else set()
    left_out = {rid: "did not fit: k results or the token budget were reached"
                for rid in load("budget_out") or []}
    for rid, why, _ in load("reranked_out") or []:
        left_out[rid] = str(why)
    for d in load("deduped_out") or []:
        left_out[d["id"]] = f"a duplicate of {d['kept'][-8:]} (cosine {float(d['cosine']):.2f})"
    for g in load("gated_out") or []:
        left_out[g["id"]] = str(g["why"])
    # The rest as the search ranked them; a row logged before ranked scores were kept
    # lists them in fused order (sorted is stable).
    rest = sorted((rid for rid in fused if rid not in returned),
                  key=lambda rid: -float(fused[rid].get("ranked", float("-inf"))))

    def row_of(rid: str) -> CandidateRow:
        f = fused.get(rid, {})
        parts = f.get("parts") or {}
        d, h, e = dense.get(rid), lexical.get(rid), entity.get(rid)
        ranked = f.get("ranked")
        return CandidateRow(
            id=rid, content=None,
            score=returned[rid] if rid in returned else None if ranked is None else float(ranked),
            fused=f.get("score"), fused_rank=f.get("rank"), freshness=freshness.get(rid),
            confidence=f.get("confidence") if weighed else None,
            period=float(lift["boost"]) if rid in lifted else None, via=f.get("via"),
            link_part=parts.get("link"),
            dense=None if d is None else Vote(parts.get("dense"), d["rank"], logged_dense_score(d)),
            lexical=None if h is None else Vote(parts.get("lexical"), h["rank"], float(h["bm25"]),
                                                f"{len(h['terms'])}/{h['total_terms']} terms"),
            entity=None if e is None else Vote(parts.get("entity"), e["rank"], title=str(e["entity_id"])),
            returned=rid in returned,
            left_out=None if rid in returned else left_out.get(rid, "not returned"))
    return [row_of(rid) for rid in [*returned, *rest]]
