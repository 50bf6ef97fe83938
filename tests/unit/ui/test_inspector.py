"""The inspector over a real store, through HTTP: who gets in, what each viewer sees (a
principal exactly what its memory tools show, never another user's record), and changes
that go through the tools' own code paths, refused without the page's CSRF token or from
another site."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("starlette")
from starlette.testclient import TestClient  # noqa: E402

from retold import build_runtime  # noqa: E402
from retold.models import Scope  # noqa: E402
from retold.runtime import Runtime  # noqa: E402
from retold.testing import World, make_record, make_world  # noqa: E402
from retold.ui.access import token_digest  # noqa: E402
from retold.ui.app import COOKIE, create_app  # noqa: E402

PRINCIPAL_TOKEN = "principal-token-aditya-0001"
OPERATOR_TOKEN = "operator-token-dana-0001"
FOREIGN = "Cleo keeps her passport in the blue drawer."
HTML = {"accept": "text/html"}


@pytest.fixture
def world(tmp_path: Path) -> World:
    world = make_world(tmp_path)
    for n in range(5):
        assert world.write(content=f"Aditya waters plant number {n} on Sundays.", attribute=f"plant_{n}").ok
    world.rt.store.write_record(make_record(scope=Scope("user", "cleo"), content=FOREIGN,
                                            attribute="passport", creator_agent_id="other-agent"))
    return world


@pytest.fixture
def rt(world: World) -> Iterator[Runtime]:
    config = world.rt.config.replace({"ui": {"page_size": 2, "tokens": [
        {"sha256": token_digest(PRINCIPAL_TOKEN), "agent_id": world.p.agent_id, "user_id": world.p.user_id},
        {"sha256": token_digest(OPERATOR_TOKEN), "operator": "dana"},
    ]}})
    with build_runtime(config, clock=world.clock, embedder=world.embedder, judge=world.judge,
                       environ={}) as opened:
        yield opened


def _client(rt: Runtime, token: str | None = None) -> TestClient:
    headers = {"authorization": f"Bearer {token}"} if token else {}
    return TestClient(create_app(rt), headers=headers, follow_redirects=False)


def _all_records(client: TestClient, url: str = "/records") -> str:
    """Every page of a records list, following the "Older records" links."""
    pages = []
    while url:
        response = client.get(url)
        assert response.status_code == 200, response.text
        pages.append(response.text)
        found = re.search(r'href="(/records\?[^"]*before=\d+)"', response.text)
        url = found.group(1).replace("&amp;", "&") if found else ""
    return "\n".join(pages)


def test_nobody_gets_in_without_a_known_token(rt: Runtime) -> None:
    anonymous = _client(rt)
    assert anonymous.get("/records").status_code == 401
    redirected = anonymous.get("/records", headers=HTML)
    assert redirected.status_code == 303 and redirected.headers["location"] == "/login"
    assert _client(rt, "not-a-token").get("/records", headers=HTML).status_code == 401
    assert _client(rt, "not-a-token").get(f"/records/{_ids(rt)[0]}").status_code == 401
    assert FOREIGN not in anonymous.get("/login").text


def test_a_principal_sees_its_records_and_never_another_users(rt: Runtime) -> None:
    client = _client(rt, PRINCIPAL_TOKEN)
    listed = _all_records(client)
    assert all(f"plant number {n}" in listed for n in range(5))
    foreign_id = rt.store.find_records(scopes=[Scope("user", "cleo")])[0].id
    probes = [listed, client.get("/scopes").text, _all_records(client, "/records?scope=user%3Acleo"),
              _all_records(client, "/records?q=passport"), client.get(f"/records/{foreign_id}").text]
    for text in probes:
        assert "blue drawer" not in text and "user:cleo" not in text and foreign_id not in text
    assert client.get(f"/records/{foreign_id}").status_code == 404  # as for an id that does not exist
    assert client.get("/records/01a00000-0000-7000-8000-000000000000").status_code == 404


def test_an_operator_sees_every_scope_with_its_counts(rt: Runtime) -> None:
    client = _client(rt, OPERATOR_TOKEN)
    scopes = client.get("/scopes").text
    assert "user:aditya" in scopes and "user:cleo" in scopes
    assert FOREIGN in _all_records(client, "/records?scope=user%3Acleo")


def test_pages_are_keyed_by_seq_and_cover_each_record_once(rt: Runtime) -> None:
    listed = _all_records(_client(rt, PRINCIPAL_TOKEN), "/records?scope=user%3Aaditya")
    assert [listed.count(f"plant number {n} ") for n in range(5)] == [1] * 5


def test_a_browser_logs_in_once_and_its_changes_need_the_pages_csrf_token(rt: Runtime) -> None:
    browser = _client(rt)
    assert browser.post("/login", data={"token": "wrong"}).status_code == 401
    logged_in = browser.post("/login", data={"token": PRINCIPAL_TOKEN})
    assert logged_in.status_code == 303
    cookie = logged_in.headers["set-cookie"]
    assert f"{COOKIE}=" in cookie and "HttpOnly" in cookie and "samesite=strict" in cookie.lower()
    record_id = _ids(rt)[0]
    page = browser.get(f"/records/{record_id}").text
    csrf = re.search(r'name="csrf" value="([^"]+)"', page)
    assert csrf is not None
    # A forged form (no token, or sent from another site with it) changes nothing.
    unsigned = browser.post(f"/records/{record_id}/act", data={"action": "forget", "reason": "x"})
    assert unsigned.status_code == 403
    forged = browser.post(f"/records/{record_id}/act", headers={"origin": "https://evil.example"},
                          data={"action": "forget", "reason": "x", "csrf": csrf.group(1)})
    assert forged.status_code == 403
    assert rt.store.get_record(record_id).status == "provisional"  # type: ignore[union-attr]
    done = browser.post(f"/records/{record_id}/act",
                        data={"action": "forget", "reason": "no longer true", "csrf": csrf.group(1)})
    assert done.status_code == 303
    assert rt.store.get_record(record_id).status == "deleted"  # type: ignore[union-attr]
    forgotten = rt.store.events(record_id=record_id)[-1]
    assert forgotten["kind"] == "record.forgotten" and forgotten["actor"] == "research-agent"
    shown = browser.get(done.headers["location"]).text
    assert "Forgotten" in shown and "plant number" not in shown  # a tombstone shows no content
    browser.post(f"/records/{record_id}/act",
                 data={"action": "restore", "reason": "it was", "csrf": csrf.group(1)})
    assert rt.store.get_record(record_id).status == "provisional"  # type: ignore[union-attr]


def test_a_refused_change_shows_the_tools_error_code(rt: Runtime) -> None:
    client = _client(rt, PRINCIPAL_TOKEN)
    record_id = _ids(rt)[0]
    refused = client.post(f"/records/{record_id}/act", data={"action": "restore", "reason": "why not"})
    assert refused.status_code == 303
    assert "invalid_input" in client.get(refused.headers["location"]).text


def test_an_operators_pin_is_recorded_under_the_operators_name(rt: Runtime) -> None:
    record_id = rt.store.find_records(scopes=[Scope("user", "cleo")])[0].id
    answer = _client(rt, OPERATOR_TOKEN).post(f"/records/{record_id}/act",
                                               data={"action": "pin", "reason": "keep for the audit"})
    assert answer.status_code == 303
    assert rt.store.is_pinned(record_id)
    assert rt.store.events(record_id=record_id)[-1]["actor"] == "operator:dana"
    # The principal cannot act on what it cannot read: the same answer as a missing id.
    refused = _client(rt, PRINCIPAL_TOKEN).post(f"/records/{record_id}/act",
                                                 data={"action": "unpin", "reason": "x"})
    assert refused.status_code == 404 and rt.store.is_pinned(record_id)


def test_a_superseded_fact_links_to_what_replaced_it(rt: Runtime, world: World) -> None:
    old = _ids(rt)[0]
    revised = rt.tools.call("memory_revise", world.p, {"id": old, "action": "supersede", "reason": "moved",
                                                      "content": "Aditya waters plant number 0 on Mondays."})
    assert "error" not in revised, revised
    page = _client(rt, PRINCIPAL_TOKEN).get(f"/records/{old}").text
    assert "superseded by" in page and "on Mondays" in page


def _ids(rt: Runtime) -> list[str]:
    return [r.id for r in rt.store.find_records(scopes=[Scope("user", "aditya")])]
