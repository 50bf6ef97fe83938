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

from retold.clock import Clock
from retold.config.activation import ActivationConfig
from retold.models import Principal, ProfileBlock
from retold.policy import grants
from retold.retrieve.explain import short_id
from retold.store import NewEvent, Store
from retold.store.activation import AmbientLine

__all__ = ["PROFILE_HEADER", "ProfileAssembler", "render_profile", "text_tokens"]

log = logging.getLogger(__name__)

PROFILE_HEADER = ("User profile (the user's standing facts and instructions;"
                  " memory_get <id> shows the source):")
_INVENTORY = "Other memories you can search for, by kind:"


def text_tokens(text: str) -> int:
    """The token estimate the search budget uses too: about four characters a token."""
    return (len(text) + 3) // 4


def _line(record: AmbientLine) -> str:
    return f"- [{short_id(record.record_id)}] {' '.join(record.content.split())}"


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
        """A fresh block from the store as it is now (not stored).

        Records are taken in order while the whole block, footer and inventory included,
        stays within ``activation.profile_max_tokens``; the first that does not fit ends
        the list, so a later fact never jumps ahead of an earlier one.
        """
        now = self.clock.now()
        chosen: list[AmbientLine] = []
        inventory: list[tuple[str, int]] = []
        omitted = 0
        if self.config.enabled:
            scopes = grants.readable_scopes(self.store, principal)
            counts = self.store.category_counts(scopes, now)
            ambient = self.store.ambient_lines(scopes, now, categories=self.config.promotable_categories,
                                               limit=self._most_lines)
            total = sum(amb for _all, amb in counts.values())
            shown: dict[str, int] = {}
            lines: list[str] = []
            inventory = _inventory(counts, shown)
            for record in ambient:
                trial = [*lines, _line(record)]
                category = record.category or "other"
                taken = {**shown, category: shown.get(category, 0) + 1}
                if text_tokens(render_profile(trial, total - len(trial), _inventory(counts, taken))) > \
                        self.config.profile_max_tokens:
                    break
                lines, shown = trial, taken
                chosen.append(record)
            inventory = _inventory(counts, shown)
            omitted = total - len(chosen)
        text = render_profile([_line(r) for r in chosen], omitted, inventory)
        return ProfileBlock(principal.session_id or "", text, tuple(r.record_id for r in chosen), omitted,
                            text_tokens(text), tuple(inventory), now)

    @property
    def _most_lines(self) -> int:
        # A line costs at least four tokens (its dash and short id), so no more can fit.
        return self.config.profile_max_tokens // 4 + 1


def _inventory(counts: dict[str, tuple[int, int]], shown: dict[str, int]) -> list[tuple[str, int]]:
    """Records per category that the block does not show, most first, then by name."""
    left = ((name, total - shown.get(name, 0)) for name, (total, _ambient) in counts.items())
    return sorted(((name, n) for name, n in left if n > 0), key=lambda kv: (-kv[1], kv[0]))
