"""The memory-use policy text adapters put in the prompt prefix, for each trigger mode."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from retold.policy.prompt import POLICY_VERSION, memory_policy, policy_text

REPO = Path(__file__).resolve().parents[3]
MODES = ("tool_only", "host_only", "hybrid")
# sha256 of json.dumps([policy_text(mode) for mode in MODES]) for memory-policy-v1: the
# texts only, so renaming a mode does not look like a change of wording.
PINNED_V1_DIGEST = "df028e3906187ba2242b9bfd7d5d981b5772d069a068a08bb779edbe125a5824"


def test_the_three_modes_give_three_different_texts() -> None:
    texts = {mode: policy_text(mode) for mode in MODES}  # type: ignore[arg-type]
    assert len(set(texts.values())) == 3


@pytest.mark.parametrize("mode", MODES)
def test_every_mode_carries_the_version_and_the_write_rules(mode: str) -> None:
    policy = memory_policy(mode)  # type: ignore[arg-type]
    assert policy.version == POLICY_VERSION == "memory-policy-v1"
    assert policy.text == policy_text(mode)  # type: ignore[arg-type]
    text = policy.text
    assert text.startswith("You have long-term memory available through tools.")
    assert "memory_write" in text and "quote their words as evidence" in text
    assert "one fact per call" in text
    assert "change a future action" in text
    assert "verbatim quote from this session" in text
    assert "Never save secrets" in text
    assert "Do not save guesses as facts." in text
    assert "check their status, source, and date" in text


def test_the_text_is_byte_stable_across_processes() -> None:
    # Provider-side prefix caching only pays when every agent process sends the same bytes,
    # so the text must not depend on hash seeds, dict order or anything else per process.
    script = ("import json, sys; from retold.policy.prompt import policy_text;"
              f" sys.stdout.write(json.dumps({{m: policy_text(m) for m in {MODES!r}}}))")
    runs = [
        subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                       env={**os.environ, "PYTHONPATH": str(REPO), "PYTHONHASHSEED": seed}).stdout
        for seed in ("1", "2")
    ]
    here = {mode: policy_text(mode) for mode in MODES}  # type: ignore[arg-type]
    assert json.loads(runs[0]) == json.loads(runs[1]) == here


def test_a_wording_change_needs_a_new_policy_version() -> None:
    # Events record POLICY_VERSION so an evaluation can tie behaviour to the exact wording;
    # that only works if the version changes whenever the text does. When this fails after
    # an intended edit, bump POLICY_VERSION and pin the new digest here.
    texts = json.dumps([policy_text(mode) for mode in MODES])  # type: ignore[arg-type]
    digest = hashlib.sha256(texts.encode("utf-8")).hexdigest()
    assert (POLICY_VERSION, digest) == ("memory-policy-v1", PINNED_V1_DIGEST)


def test_tool_only_tells_the_model_when_to_search_and_mentions_no_recall() -> None:
    text = policy_text("tool_only")
    assert "call memory_search with one to three specific phrases" in text
    assert "Do not search for general knowledge" in text
    assert "recalled memory" not in text


def test_hybrid_appends_the_recalled_memory_pair() -> None:
    base, hybrid = policy_text("tool_only"), policy_text("hybrid")
    assert hybrid.startswith(base)
    assert hybrid.endswith(
        "Relevant memories may also appear automatically before you answer, marked as recalled memory."
        " Treat them exactly like search results: check their status, source, and date, and use"
        " memory_search yourself for anything more specific."
    )


def test_auto_never_asks_the_model_to_search() -> None:
    text = policy_text("host_only")
    assert "memory_search" not in text
    assert text.endswith("marked as recalled memory.")
    assert "anything more specific" not in text


def test_unknown_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="trigger mode"):
        policy_text("sometimes")  # type: ignore[arg-type]
