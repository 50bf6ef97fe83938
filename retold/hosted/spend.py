"""What hosted calls cost: answered calls and their input and output tokens, counted for
one piece of work (an extraction run) on the thread that does it.

The providers note each answer's usage as it arrives; whoever wants the total opens
:func:`counting` around the work. A thread-local counter rather than a value returned
through every layer, so the extractor and reviewer protocols (and their fakes) stay as
they are: a fake that calls no provider simply costs nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass

__all__ = ["Spend", "counting", "note"]

_current = threading.local()


@dataclass
class Spend:
    calls: int = 0  # answers received (a failed attempt with no answer is not counted)
    input_tokens: int = 0
    output_tokens: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


@contextmanager
def counting() -> Iterator[Spend]:
    """Count the hosted answers this thread receives until the block ends."""
    outer = getattr(_current, "spend", None)
    spend = _current.spend = Spend()
    try:
        yield spend
    finally:
        _current.spend = outer
        if outer is not None:  # a block inside another counts for both
            outer.calls += spend.calls
            outer.input_tokens += spend.input_tokens
            outer.output_tokens += spend.output_tokens


def note(input_tokens: int | None, output_tokens: int | None) -> None:
    """One answer arrived with this usage (None where the provider reports none)."""
    spend = getattr(_current, "spend", None)
    if spend is not None:
        spend.calls += 1
        spend.input_tokens += int(input_tokens or 0)
        spend.output_tokens += int(output_tokens or 0)
