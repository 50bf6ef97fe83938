"""What each inspector page shows and what each of its buttons does, for one viewer,
through the same parts the tools and the host API use: nothing here writes SQL, and a
principal's view of a record is built by the code that answers its ``memory_get``.

A principal reads exactly the scopes ``memory_search`` and ``memory_get`` would give it
(grants and membership included); a record of any other scope answers as missing, so a
page never tells a principal that such a record exists.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from retold.errors import RetoldError
from retold.ingest.revision import RevisionError
from retold.models import RECORD_STATUSES, RECORD_TYPES, Scope
from retold.policy.grants import readable_scopes
from retold.runtime import Runtime
from retold.store.browse import BrowseFilter, ScopeCounts
from retold.ui.access import Viewer

__all__ = ["ACTIONS", "ActionOutcome", "Inspector", "RecordsPage"]

ACTIONS = ("forget", "restore", "pin", "unpin", "confirm")


@dataclass(frozen=True)
class RecordsPage:
    """One page of a records list and the key of the next one (None on the last)."""

    records: list[Any]
    next_before: int | None
    scopes: list[Scope]


@dataclass(frozen=True)
class ActionOutcome:
    """What a button did: ``code`` is None on success, else the tool's error code."""

    message: str
    code: str | None = None
    details: dict[str, Any] = field(default_factory=dict)

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
                           readable if readable is not None else [c.scope for c in self.scopes(viewer)])

    def record(self, viewer: Viewer, record_id: str) -> dict[str, Any] | None:
        """The record page's content: the tool's view of the record and, for an operator,
        its whole event trail with actors and payloads; None for missing or unreadable."""
        view = self.rt.tools.describe(record_id, viewer.principal)
        if view is None:
            return None
        if viewer.is_operator:
            view["events"] = self.rt.store.events(record_id=view["id"])
        view["restorable_until"] = view.get("restorable_until")
        return view

    def act(self, viewer: Viewer, record_id: str, action: str, reason: str) -> ActionOutcome:
        """Run one button: a principal's through the memory tools, exactly as its agent
        would call them; an operator's through the reviser and the host API, recorded
        under the operator's name."""
        if action not in ACTIONS:
            return ActionOutcome(f"unknown action {action!r}", "invalid_input")
        if viewer.principal is not None:
            payload = {"id": record_id, "reason": reason}
            if action == "forget":
                answer = self.rt.tools.call("memory_forget", viewer.principal, payload)
            else:
                answer = self.rt.tools.call("memory_revise", viewer.principal, {**payload, "action": action})
            if "error" in answer:
                error = answer["error"]
                return ActionOutcome(str(error["message"]), str(error["code"]))
            return ActionOutcome(f"{action}: done", details=answer)
        return self._operator_act(viewer, record_id, action, reason)

    def _operator_act(self, viewer: Viewer, record_id: str, action: str, reason: str) -> ActionOutcome:
        record = self.rt.store.get_record(record_id)
        if record is None:
            return ActionOutcome(f"no memory {record_id}", "not_found")
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


FILTER_CHOICES = {"status": RECORD_STATUSES, "type": RECORD_TYPES}
