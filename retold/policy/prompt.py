"""The memory-use policy text adapters add to the agent's prompt prefix.

Prompts are versioned code: the text for each trigger mode is a pure function of the
mode, and :data:`POLICY_VERSION` changes whenever any word of it does, so an evaluation
run can tie a behaviour change to the instructions that produced it. The wording stays
short and byte-stable so provider-side prefix caching keeps working. The version is
recorded by the caller on its events; it is not part of the text the model reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

__all__ = ["POLICY_VERSION", "RECALLED_HEADER", "MemoryPolicy", "TriggerMode", "memory_policy", "policy_text"]

POLICY_VERSION = "memory-policy-v1"

TriggerMode = Literal["tool_only", "host_only", "hybrid"]
_MODES: tuple[str, ...] = get_args(TriggerMode)

_INTRO = "You have long-term memory available through tools."
# The two sentences about searching; host_only mode registers no memory_search, so it drops
# both.
_SEARCH = (
    "Before acting on anything that could depend on the user's preferences, earlier "
    "decisions, or previous sessions, call memory_search with one to three specific phrases. "
    "Do not search for general knowledge or for facts already visible in this conversation."
)
_CHECK = (
    "When results come back, check their status, source, and date before relying on them; "
    "a provisional or old record may be wrong, and you can ask the user."
)
_WRITE = (
    "When the user states a preference, a fact about themselves, or a decision, save it with "
    "memory_write and quote their words as evidence. Save decisions you make together as "
    "episodic records with the reason. Do not save guesses as facts."
)
# The memory_write contract (one fact, verbatim evidence, no secrets) in the model's own
# instructions.
_WRITE_RULES = (
    "Write one fact per call, and only what would change a future action. Evidence must be "
    "a verbatim quote from this session. Never save secrets such as passwords, keys, or tokens."
)
# The header of every block of host-issued memory; the sentence below names it.
RECALLED_HEADER = "recalled memory"
# The sentence pair for host-issued recall: hybrid uses both, host_only only the first.
_RECALLED = ("Relevant memories may also appear automatically before you answer, marked as "
             + RECALLED_HEADER + ".")
_RECALLED_SEARCH = (
    "Treat them exactly like search results: check their status, source, and date, and use "
    "memory_search yourself for anything more specific."
)


@dataclass(frozen=True)
class MemoryPolicy:
    """The policy text for one trigger mode with the version an event should record."""

    mode: TriggerMode
    text: str
    version: str = POLICY_VERSION


def policy_text(mode: TriggerMode) -> str:
    """The memory-use policy for ``mode``.

    ``tool_only`` is the base text. ``hybrid`` appends the recalled-memory sentence pair,
    because some memory arrives without asking. ``host_only`` drops the sentences about calling
    memory_search (the tool is not registered) and appends only the sentence announcing
    recalled memory. Raises ValueError for an unknown mode.
    """
    if mode not in _MODES:
        raise ValueError(f"trigger mode must be one of {', '.join(_MODES)}, got {mode!r}")
    parts = [_INTRO]
    if mode != "host_only":
        parts.append(_SEARCH)
    parts += [_CHECK, _WRITE, _WRITE_RULES]
    if mode == "hybrid":
        parts += [_RECALLED, _RECALLED_SEARCH]
    elif mode == "host_only":
        parts.append(_RECALLED)
    return " ".join(parts)


def memory_policy(mode: TriggerMode) -> MemoryPolicy:
    """:func:`policy_text` with its mode and :data:`POLICY_VERSION`, for callers that log it."""
    return MemoryPolicy(mode, policy_text(mode))
