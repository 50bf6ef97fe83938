"""Bundles: the hash of everything that decides what host-issued memory a turn gets.

A configuration is evaluated as a whole (the planner's and the judge's models and prompt
versions, the gap limits, the retrieval settings the gap searches run under, the
embedding family), so a result recorded for it holds only while none of those change.
The store keeps recorded results (``retold bundles record``); the orchestrator serves a
regenerated reply only under a bundle with a recorded pass and runs in shadow otherwise.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from retold.config import Config
from retold.plain import to_plain

__all__ = ["bundle_components", "bundle_hash"]


def bundle_components(config: Config, planner: str, judge: str, family: str) -> dict[str, Any]:
    """What decides a turn under ``config``, with the planner's and judge's versions
    (model and prompt) and the embedding family the searches rank with."""
    retrieval = config.retrieval
    return {
        "planner": planner,
        "admission": judge,
        "max_gaps": config.utility.max_gaps,
        "per_gap_k": config.utility.per_gap_k,
        "embedding_family": family,
        "fusion": to_plain(retrieval.fusion),
        "gate": to_plain(retrieval.gate),
        "freshness": to_plain(retrieval.freshness),
        "token_budget": retrieval.token_budget,
    }


def bundle_hash(components: dict[str, Any]) -> str:
    """A short, stable name for ``components``: the same settings give the same hash in
    every process and on every machine."""
    text = json.dumps(components, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]
