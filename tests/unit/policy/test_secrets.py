"""The secret screen against a hand-labelled corpus: every credential caught with its
kind, at most 1% of ordinary text (numbers, hashes in git context, UUIDs, version strings,
talk about passwords and tokens) flagged, and refusals that never repeat the secret."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from retold.policy.secrets import find_secret, screen

CORPUS = json.loads((Path(__file__).parents[2] / "data" / "secrets.json").read_text("utf-8"))
SECRETS: list[dict[str, str]] = CORPUS["secrets"]
ORDINARY: list[str] = CORPUS["ordinary"]


def test_the_corpus_covers_every_kind_with_near_misses_beside_it() -> None:
    kinds = {s["kind"] for s in SECRETS}
    assert kinds == {"private_key", "aws_key", "api_key", "bearer_token", "jwt", "password",
                     "card_number", "connection_string"}
    assert len(SECRETS) >= 100 and len(ORDINARY) >= 300


@pytest.mark.parametrize("entry", SECRETS, ids=[f"{s['kind']}-{i}" for i, s in enumerate(SECRETS)])
def test_every_labelled_secret_is_caught_as_its_kind(entry: dict[str, str]) -> None:
    assert find_secret(entry["text"]) == entry["kind"]


def test_ordinary_text_is_flagged_at_most_one_time_in_a_hundred() -> None:
    flagged = [(text, find_secret(text)) for text in ORDINARY if find_secret(text)]
    assert len(flagged) <= len(ORDINARY) // 100, flagged


def test_a_finding_names_the_field_and_kind_but_never_the_secret() -> None:
    key = "sk-proj-Zx9Tq4Lm7Wn2Kp5Rv8Yb3Hc6Jd1Fg0Sa4Qe7Ut2Io9Pl"
    found = screen(content="Aditya works on billing.", evidence=f"my key is {key}")
    assert found is not None and (found.field, found.kind) == ("evidence", "api_key")
    assert key not in found.message and "Zx9Tq4" not in found.message
    assert screen(content="Aditya works on billing.", evidence=None) is None


def test_a_card_number_needs_the_luhn_check_and_an_issuer_prefix() -> None:
    assert find_secret("card 4111 1111 1111 1111") == "card_number"
    assert find_secret("card 4111 1111 1111 1112") is None  # fails Luhn
    assert find_secret("ref 9111 1111 1111 1110") is None  # passes Luhn, no issuer starts with 9


@pytest.mark.parametrize("text", ["_" * 2000, "x_" * 1000, "a-" * 1000, "4 " * 1000, "password " * 220,
                                  "token " * 330, "sk-" * 660, "a://b:" * 330])
def test_hostile_text_is_screened_in_linear_time(text: str) -> None:
    started = time.perf_counter()
    find_secret(text)
    assert time.perf_counter() - started < 0.25  # a quadratic pattern takes seconds here
