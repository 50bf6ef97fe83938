"""The profile block: the principal's ambient memories, assembled once per session.

The block holds the live ambient records of every scope the principal may read, in a
stable order (the promotable categories' configured order, then the user's own scopes
before shared ones, then oldest first), cut at ``activation.profile_max_tokens``, each
line with the short id ``memory_get`` accepts. A content-free inventory (records per
category, no text) follows, so the model knows what a search could find. The first
assembly for a session is stored with it and every later request for that session gets
the stored bytes, so the prompt prefix stays cacheable and an answer can be traced to
the profile it saw. See docs/decisions.md, "The ambient profile".
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from retold.config_activation import ActivationConfig
from retold.models import Principal, ProfileBlock, Record
from retold.policy import grants
from retold.retrieve.explain import short_id
from retold.store import NewEvent, Store
from retold.util import Clock

__all__ = ["PROFILE_HEADER", "ProfileAssembler", "render_profile", "text_tokens"]

log = logging.getLogger(__name__)

PROFILE_HEADER = ("User profile (standing facts and instructions the user gave; follow them unless "
                  "the user says otherwise; memory_get <id> shows where one came from):")
_INVENTORY = "Other memories you can search for, by kind:"
_SCOPE_ORDER = {"user": 0, "agent": 1, "project": 2, "org": 3}


def text_tokens(text: str) -> int:
    """The token estimate the search budget uses too: about four characters a token."""
    return (len(text) + 3) // 4


def _line(record: Record) -> str:
    return f"- [{short_id(record.id)}] {' '.join(record.content.split())}"


def render_profile(lines: Sequence[str], omitted: int, inventory: Sequence[tuple[str, int]]) -> str:
    """The block's text; "" when there is nothing to say."""
    parts: list[str] = []
    if lines:
        parts += [PROFILE_HEADER, *lines]
        if omitted:
            parts.append(f"({omitted} more not shown; memory_search finds them)")
    if inventory:
        parts.append(f"{_INVENTORY} " + ", ".join(f"{name} {count}" for name, count in inventory) + ".")
    return "\n".join(parts)


class ProfileAssembler:
    """Builds and keeps each session's profile block."""

    def __init__(self, store: Store, config: ActivationConfig, clock: Clock) -> None:
        self.store, self.config, self.clock = store, config, clock
        self._rank = {name: i for i, name in enumerate(config.promotable_categories)}

    def for_session(self, principal: Principal) -> ProfileBlock:
        """The session's stored block, assembled and stored on the first call. The session
        must exist (the block is kept with it)."""
        if principal.session_id is None:
            raise ValueError("a profile block belongs to a session; the principal has none")
        stored = self.store.profile_block(principal.session_id)
        if stored is not None:
            return stored
        block = self.assemble(principal)
        event = NewEvent("session.profile", principal.agent_id, {
            "session_id": principal.session_id, "user_id": principal.user_id,
            "records": list(block.record_ids), "omitted": block.omitted, "tokens": block.tokens,
            "chars": len(block.text), "inventory": dict(block.inventory)})
        kept, stored_now = self.store.keep_profile_block(block, principal.agent_id, principal.user_id, event)
        if stored_now:
            log.info("profile for session %s: %d records, %d omitted, %d tokens", principal.session_id,
                     len(block.record_ids), block.omitted, block.tokens)
        return kept

    def assemble(self, principal: Principal) -> ProfileBlock:
        """A fresh block from the store as it is now (not stored)."""
        now = self.clock.now()
        scopes = grants.readable_scopes(self.store, principal)
        chosen: list[Record] = []
        omitted = 0
        inventory: list[tuple[str, int]] = []
        if self.config.enabled:
            ambient = sorted(self.store.ambient_records(scopes, now), key=self._order)
            counts = self.store.category_counts(scopes, now)
            budget = self.config.profile_max_tokens
            lines: list[str] = []
            for record, _category in ambient:
                candidate = [*lines, _line(record)]
                if text_tokens(render_profile(candidate, 0, ())) > budget:
                    omitted += 1
                    continue
                lines = candidate
                chosen.append(record)
            # The inventory counts what the profile does not show, so it never repeats a line.
            shown = {r.id for r in chosen}
            for record, category in ambient:
                if record.id in shown:
                    counts[category or "other"] = counts.get(category or "other", 0) - 1
            inventory = sorted(((k, v) for k, v in counts.items() if v > 0), key=lambda kv: (-kv[1], kv[0]))
        text = render_profile([_line(r) for r in chosen], omitted, inventory)
        return ProfileBlock(principal.session_id or "", text, tuple(r.id for r in chosen), omitted,
                            text_tokens(text), tuple(inventory), now)

    def _order(self, item: tuple[Record, str | None]) -> tuple[int, int, int]:
        record, category = item
        rank = self._rank.get(category or "", len(self._rank))
        return rank, _SCOPE_ORDER.get(record.scope.kind, 9), record.seq
