"""Session extraction: the Extractor protocol and its implementations (LLD 5, 8.3).

``StructuredLLMExtractor`` (one hosted structured call with the versioned prompt
``prompts/extract_v1.md``), ``FakeExtractor`` (tests) and ``ReplayExtractor`` (serves a
recorded ExtractionOutput from a JSON file; every event it produces says "replayed").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from retold.models import ExtractionContext, ExtractionOutput, Turn

__all__ = ["Extractor", "FakeExtractor"]


class Extractor(Protocol):
    """Turns a transcript into candidate records and one session summary (LLD 8.3)."""

    name: str  # recorded on extraction events, with the prompt version
    prompt_version: str

    def extract(self, transcript: list[Turn], context: ExtractionContext) -> ExtractionOutput: ...


@dataclass
class FakeExtractor:
    """Returns a predefined output and records every call (LLD 17.1)."""

    output: ExtractionOutput
    name: str = "fake"
    prompt_version: str = "fake-1"
    calls: list[tuple[list[Turn], ExtractionContext]] = field(default_factory=list)

    def extract(self, transcript: list[Turn], context: ExtractionContext) -> ExtractionOutput:
        self.calls.append((list(transcript), context))
        return self.output
