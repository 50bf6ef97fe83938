"""``retold reviews`` and ``retold activation`` through the real entry point, in process,
over a store whose records went through memory_write (so the policy judged them)."""

from __future__ import annotations

from pathlib import Path

import pytest

from retold import build_runtime, load_config
from retold.cli import main
from retold.config.env import store_target as store_keys
from retold.models import Principal, Scope

AGENT, USER = "cli-agent", "cleo"
TURN = "I like the colour teal. Maybe I prefer short answers? Also, I think I enjoy long hikes."


@pytest.fixture
def store(tmp_path: Path, store_target: str) -> tuple[list[str], dict[str, str]]:
    """A store with two records waiting for review and one inference; returns the common
    arguments and the record ids by name."""
    config = tmp_path / "config.yaml"
    # The store path places the embedded broker's file, on both backends.
    config.write_text(f"store:\n  path: {tmp_path / 'mem.sqlite'}\nembedding:\n  model: fake\n")
    path = store_target
    ids: dict[str, str] = {}
    with build_runtime(load_config(config, overrides={"store": store_keys(path)})) as rt:
        rt.host.grant(AGENT, Scope("user", USER), read=True, write=True)
        principal = Principal(AGENT, USER, "sess-1")
        rt.hooks.on_session_start(principal)
        rt.hooks.on_turn(principal, "user", TURN)
        for name, content, attribute, quote, kind in (
            ("teal", "Cleo likes the colour teal.", "colour_choice", "I like the colour teal",
             "user_statement"),
            ("short", "Cleo might prefer short answers.", "answer_length", "Maybe I prefer short answers",
             "user_statement"),
            ("hikes", "Cleo enjoys long hikes.", "pastime", None, "agent_inference"),
        ):
            payload = {"type": "semantic", "content": content, "attribute": attribute, "source_kind": kind}
            if quote:
                payload["evidence"] = quote
            result = rt.tools.call("memory_write", principal, payload)
            ids[name] = result["record_id"]
    return ["--store", path, "--config", str(config)], ids


def _events(common: list[str], kind: str) -> list[dict[str, object]]:
    config = load_config(common[3], overrides={"store": store_keys(common[1])})
    with build_runtime(config) as rt:
        return rt.store.events(kind=kind)


def _profile(common: list[str], session_id: str) -> tuple[str, ...]:
    config = load_config(common[3], overrides={"store": store_keys(common[1])})
    with build_runtime(config) as rt:
        principal = Principal(AGENT, USER, session_id)
        rt.hooks.on_session_start(principal)
        return rt.profiles.for_session(principal).record_ids


def test_the_review_queue_round_trip(store: tuple[list[str], dict[str, str]],
                                     capsys: pytest.CaptureFixture[str]) -> None:
    common, ids = store
    assert main(["reviews", "list", *common]) == 0
    listed = capsys.readouterr().out
    assert ids["teal"] in listed and ids["short"] in listed and ids["hikes"] not in listed
    assert "uncategorised" in listed and "hedged" in listed and "2 waiting for review" in listed

    assert main(["reviews", "resolve", ids["teal"], "--as", "ambient", "--resolver", "dana",
                 "--reason", "Cleo confirmed it", *common]) == 0
    assert f"resolved {ids['teal']} as ambient" in capsys.readouterr().out
    assert main(["reviews", "resolve", ids["short"], "--as", "reject", "--resolver", "dana", *common]) == 0
    capsys.readouterr()

    resolved = _events(common, "review.resolved")
    assert [(e["record_id"], e["actor"]) for e in resolved] == [(ids["teal"], "dana"), (ids["short"], "dana")]
    assert resolved[0]["payload"]["resolution"] == "ambient"  # type: ignore[index]
    assert resolved[0]["payload"]["reason"] == "Cleo confirmed it"  # type: ignore[index]
    forgotten = _events(common, "record.forgotten")
    assert [e["record_id"] for e in forgotten] == [ids["short"]]
    assert _profile(common, "sess-2") == (ids["teal"],)
    assert main(["reviews", "list", *common]) == 0
    assert "0 waiting for review" in capsys.readouterr().out


def test_resolving_what_is_not_waiting_is_one_line_and_exit_1(store: tuple[list[str], dict[str, str]],
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    common, ids = store
    assert main(["reviews", "resolve", ids["hikes"], "--as", "ambient", "--resolver", "dana", *common]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not waiting for review" in err[0]
    assert main(["reviews", "resolve", "--as", "ambient", *common]) == 2
    assert "resolve needs ID, --resolver" in capsys.readouterr().err


def test_backlog_exits_3_when_a_limit_is_breached(store: tuple[list[str], dict[str, str]],
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    common, _ids = store
    assert main(["reviews", "backlog", "--max-open", "1", *common]) == 3
    captured = capsys.readouterr()
    assert "open reviews: 2" in captured.out
    assert captured.err.strip() == "retold reviews: backlog breached: 2 open > --max-open 1"
    assert main(["reviews", "backlog", "--max-open", "2", "--max-age-days", "1", *common]) == 0


def test_activation_by_hand_is_checked_and_audited(store: tuple[list[str], dict[str, str]],
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    common, ids = store
    by_dana = ["--resolver", "dana", *common]
    assert main(["activation", ids["hikes"], "ambient", "--reason", "sure", *by_dana]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cannot be ambient" in err[0] and "inference" in err[0]
    assert main(["activation", ids["teal"], "ambient", "--reason", "asked", *by_dana]) == 0
    assert capsys.readouterr().out.strip() == f"record {ids['teal']}: ambient (asked)"
    manual = [e for e in _events(common, "record.activation") if e["actor"] == "dana"]
    assert len(manual) == 1 and manual[0]["payload"]["manual"] is True  # type: ignore[index]
    assert _profile(common, "sess-2") == (ids["teal"],)
