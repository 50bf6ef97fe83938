"""The inspector over a real store, through HTTP: who gets in, what each viewer sees (a
principal exactly what its memory tools show, never another user's record), and changes
that go through the tools' own code paths, refused without the page's CSRF token or from
another site."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

pytest.importorskip("starlette")
from starlette.testclient import TestClient  # noqa: E402

from retold.models import Principal, Scope  # noqa: E402
from retold.runtime import Runtime  # noqa: E402
from retold.testing import World, make_record, make_world  # noqa: E402
from retold.ui.app import COOKIE  # noqa: E402
from tests.inspector import OPERATOR_TOKEN, PRINCIPAL_TOKEN, inspector_runtime  # noqa: E402
from tests.inspector import client as _client  # noqa: E402
from tests.sql import rows  # noqa: E402

FOREIGN = "Cleo keeps her passport in the blue drawer."
HTML = {"accept": "text/html"}


@pytest.fixture
def world(tmp_path: Path, store_target: str) -> World:
    world = make_world(tmp_path, store=store_target)
    for n in range(5):
        assert world.write(content=f"Aditya waters plant number {n} on Sundays.", attribute=f"plant_{n}").ok
    world.rt.store.write_record(make_record(scope=Scope("user", "cleo"), content=FOREIGN,
                                            attribute="passport", creator_agent_id="other-agent"))
    return world


@pytest.fixture
def rt(world: World) -> Iterator[Runtime]:
    with inspector_runtime(world, page_size=2) as opened:
        yield opened


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


@pytest.mark.parametrize("path", ["/", "/scopes", "/search?q=plants"])
def test_a_browser_without_a_session_is_sent_to_log_in_and_a_script_is_told_401(
        rt: Runtime, path: str) -> None:
    anonymous = _client(rt)
    for browser in (HTML, {"accept": "*/*", "sec-fetch-mode": "navigate"},
                    # a proxy's own login in front of the inspector is not a token of ours
                    {**HTML, "authorization": "Basic ZGFuYTpwdw=="}):
        sent = anonymous.get(path, headers=browser)
        assert sent.status_code == 303 and sent.headers["location"] == "/login", browser
    for script in ({}, {"accept": "application/json"}, {"accept": "*/*"}):
        refused = anonymous.get(path, headers=script)
        assert refused.status_code == 401 and refused.headers["www-authenticate"].startswith("Bearer")
    assert _client(rt, "not-a-token").get(path, headers=HTML).status_code == 401


def test_a_session_still_counts_behind_a_proxy_that_adds_its_own_login(rt: Runtime) -> None:
    browser = _client(rt)
    browser.headers["authorization"] = "Basic ZGFuYTpwdw=="
    assert browser.post("/login", data={"token": PRINCIPAL_TOKEN}).status_code == 303
    home = browser.get("/", headers=HTML)
    assert home.status_code == 303 and home.headers["location"] == "/scopes"
    assert "user:aditya" in browser.get("/scopes", headers=HTML).text


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


def test_the_search_page_shows_the_decision_and_each_channels_vote(rt: Runtime) -> None:
    client = _client(rt, PRINCIPAL_TOKEN)
    page = client.get("/search", params={"q": "which plant does Aditya water on Sundays",
                                         "answer_at": "0, 1"})
    assert page.status_code == 200, page.text
    assert "Decision" in page.text and "asked_coverage" in page.text and "beyond_names" in page.text
    # The same logged search decided again side by side: 0 always answers, 1 never does.
    assert re.search(r"at 0\.0</dt><dd>would answer", page.text)
    assert re.search(r"at 1\.0</dt><dd>would abstain", page.text)
    rows = re.findall(r'<tr class="candidate" data-id="[^"]+">\s*<td>(\d+)</td>', page.text)
    assert rows[:3] == ["1", "2", "3"]
    logged = rt.store.search_log_rows()[-1]
    assert logged["agent_id"] == "research-agent" and logged["user_id"] == "aditya"


def _candidate_rows(page: str) -> list[dict[str, str]]:
    """Each candidate row of the search page, in the page's order: its record id and the
    visible text of its score, lexical and returned cells."""
    found = []
    for record_id, cells in re.findall(r'<tr class="candidate" data-id="([^"]+)">(.*?)</tr>', page, re.S):
        texts = [html.unescape(re.sub(r"<[^>]+>", "", cell)).strip()
                 for cell in re.findall(r"<td[^>]*>(.*?)</td>", cells, re.S)]
        part = re.search(r'<td class="lexical">.*?data-part="([^"]*)"', cells, re.S)
        found.append({"id": record_id, "score": texts[2], "lexical": texts[5], "returned": texts[7],
                      "lexical_part": part.group(1) if part else ""})
    return found


def test_the_search_page_shows_the_numbers_and_order_of_the_block_the_model_reads(
        rt: Runtime, world: World) -> None:
    """One search through memory_search and the same search through the page, on one
    store: the page lists the returned records in the tool's order with the tool's scores,
    and every record the block says lexical matched has a nonzero lexical part there."""
    # What the user said, which the store trusts more than the plants an agent inferred:
    # it fuses below them and confidence lifts it above them in the answer.
    said = rt.hooks.on_turn(world.p, "user", "The plant is watered on Sundays.")
    assert "error" not in rt.tools.call("memory_write", said, {
        "type": "semantic", "content": "The plant is watered on Sundays.", "attribute": "watering",
        "source_kind": "user_statement", "evidence": "The plant is watered on Sundays."})
    question = "which plant does Aditya water on Sundays"
    tool = rt.tools.call("memory_search", said, {"queries": [question]})
    answered = [(r["id"], f"{r['score']:.3f}") for r in tool["results"]]
    fused_ranks = [r["explanation"]["fused_rank"] for r in tool["results"]]
    assert len(answered) >= 3 and fused_ranks != sorted(fused_ranks)  # the order is not the fused one

    page = _client(rt, PRINCIPAL_TOKEN).get("/search", params={"q": question})
    assert page.status_code == 200, page.text
    rows = _candidate_rows(page.text)
    assert [(r["id"], r["score"]) for r in rows if r["returned"] == "yes"] == answered
    assert [r["id"] for r in rows[:len(answered)]] == [i for i, _ in answered]  # the model's first
    block = re.search(r"<h2>What the model reads</h2>\s*<pre>(.*?)</pre>", page.text, re.S)
    assert block is not None and html.unescape(block.group(1)) == tool["rendered"]
    shown = {r["id"]: r for r in rows}
    for result in tool["results"]:
        if "lexical" not in result["explanation"]["matched_by"]:
            continue
        said = re.search(r"lexical (\d+/\d+) \(rank (\d+)\)", result["explanation"]["summary"])
        assert said is not None
        cell = re.fullmatch(r"\+(<?\d+\.\d+) · rank (\d+) · (\d+/\d+) terms", shown[result["id"]]["lexical"])
        assert cell is not None, shown[result["id"]]
        assert cell.group(1) != "0.000" and float(shown[result["id"]]["lexical_part"]) > 0
        assert (cell.group(3), cell.group(2)) == said.groups()


def test_the_search_page_searches_as_of_a_time_and_refuses_a_bad_one(rt: Runtime, world: World) -> None:
    old = "Aditya's locker is number 12."
    new = "Aditya's locker is number 40."
    world.judge.table[(old, new)] = "contradicts"
    assert world.write(content=old, attribute="locker", event_at=datetime(2026, 1, 5, tzinfo=UTC)).ok
    moved = world.write(content=new, attribute="locker", valid_from=datetime(2026, 3, 1, tzinfo=UTC))
    assert moved.outcome.startswith("superseded:"), moved
    client = _client(rt, PRINCIPAL_TOKEN)
    then = client.get("/search", params={"q": "Aditya locker number", "as_of": "2026-02-10T00:00:00Z"})
    assert then.status_code == 200, then.text
    block = then.text.split("What the model reads")[1].split("Candidates")[0]
    assert "number 12" in block and "number 40" not in block
    assert "valid 2026-01-05 to 2026-03-01" in block
    today = client.get("/search", params={"q": "Aditya locker number"}).text
    assert "number 40" in today.split("What the model reads")[1].split("Candidates")[0]
    bad = client.get("/search", params={"q": "Aditya locker number", "as_of": "February"})
    assert bad.status_code == 400 and "as_of" in bad.text


def test_the_search_page_shows_the_lift_of_a_named_period(rt: Runtime, world: World) -> None:
    assert world.write(type="episodic", content="Aditya repotted the fern.",
                       event_at=datetime(2026, 2, 10, tzinfo=UTC)).ok
    page = _client(rt, PRINCIPAL_TOKEN).get("/search", params={"q": "what did Aditya repot in February"})
    assert page.status_code == 200, page.text
    assert "× named period 1.20" in page.text


def test_the_search_page_names_the_entity_a_record_was_found_through(rt: Runtime) -> None:
    page = _client(rt, PRINCIPAL_TOKEN).get("/search", params={"q": "which plant does Aditya water"}).text
    named = re.findall(r'<a href="/entities/([^"]+)" title="\1">([^<]+)</a>', page)
    assert named and {name for _, name in named} == {"aditya"}


def test_a_principal_searches_only_as_itself(rt: Runtime) -> None:
    page = _client(rt, PRINCIPAL_TOKEN).get("/search", params={
        "q": "where is the passport kept", "agent": "other-agent", "user": "cleo"})
    assert page.status_code == 200
    assert "blue drawer" not in page.text
    assert rt.store.search_log_rows()[-1]["user_id"] == "aditya"


def test_an_operator_searches_as_a_chosen_principal(rt: Runtime, world: World) -> None:
    rt.host.grant("other-agent", Scope("user", "cleo"), read=True, write=True)
    page = _client(rt, OPERATOR_TOKEN).get("/search", params={
        "q": "where does Cleo keep her passport", "agent": "other-agent", "user": "cleo", "answer_at": "0"})
    assert page.status_code == 200
    assert "blue drawer" in page.text
    refused = _client(rt, OPERATOR_TOKEN).get("/search", params={"q": "x", "agent": "a/b", "user": "u"})
    assert refused.status_code == 400 and "must not contain" in refused.text


def test_sessions_show_a_principal_its_own_only(rt: Runtime, world: World) -> None:
    rt.hooks.on_turn(Principal("other-agent", "cleo", "s-cleo"), "user", "My passport is in the blue drawer.")
    mine = _client(rt, PRINCIPAL_TOKEN).get("/sessions").text
    assert "s1" in mine and "s-cleo" not in mine
    assert "s-cleo" in _client(rt, OPERATOR_TOKEN).get("/sessions").text


def _tool_write(rt: Runtime, principal: Principal, quote: str, content: str, attribute: str,
                activation: str = "review") -> str:
    """A memory_write quoting a turn just said, as an agent makes it."""
    principal = rt.hooks.on_turn(principal, "user", quote)
    written = rt.tools.call("memory_write", principal, {
        "type": "semantic", "content": content, "attribute": attribute, "source_kind": "user_statement",
        "evidence": quote})
    assert written.get("activation") == activation, written
    return str(written["record_id"])


def test_a_review_is_resolved_from_its_page_through_the_activator(rt: Runtime, world: World) -> None:
    mine = _tool_write(rt, world.p, "I keep my bike in the shed.", "Aditya keeps the bike in the shed.",
                       "bike")
    rt.host.grant("other-agent", Scope("user", "cleo"), read=True, write=True)
    theirs = _tool_write(rt, Principal("other-agent", "cleo", "s-cleo"),
                         "My passport is in the blue drawer.", "Cleo keeps the passport in the blue drawer.",
                         "passport_place")
    client = _client(rt, PRINCIPAL_TOKEN)
    waiting = client.get("/reviews").text
    assert mine in waiting and theirs not in waiting and "blue drawer" not in waiting
    assert theirs in _client(rt, OPERATOR_TOKEN).get("/reviews").text
    done = client.post(f"/reviews/{mine}", data={"resolution": "ambient", "reason": "always relevant"})
    assert done.status_code == 303 and "resolved" in client.get(done.headers["location"]).text
    assert rt.store.activation_of(mine).activation == "ambient"  # type: ignore[union-attr]
    resolved = rt.store.events(record_id=mine)[-1]
    assert resolved["kind"] == "review.resolved" and resolved["payload"]["resolver"] == "research-agent"
    refused = client.post(f"/reviews/{theirs}", data={"resolution": "reject", "reason": "x"})
    assert refused.status_code == 404
    assert rt.store.activation_of(theirs).activation == "review"  # type: ignore[union-attr]


def test_entities_show_aliases_and_lead_to_their_records_within_readable_scopes(rt: Runtime) -> None:
    cleo = rt.store.create_entity("person", "Cleo Marsh", Scope("user", "cleo"))
    rt.store.add_alias(cleo.id, "cleo")
    client = _client(rt, PRINCIPAL_TOKEN)
    listed = client.get("/entities").text
    assert "aditya" in listed and "Cleo Marsh" not in listed
    assert client.get(f"/entities/{cleo.id}").status_code == 404
    aditya = re.search(r'href="/entities/([^"]+)">aditya<', listed)
    assert aditya is not None
    page = client.get(f"/entities/{aditya.group(1)}").text
    about = re.search(r'href="(/records\?entity=[^"]+)"', page)
    assert about is not None and "plant number" in _all_records(client, about.group(1).replace("&amp;", "&"))
    operator = _client(rt, OPERATOR_TOKEN)
    assert "Cleo Marsh" in operator.get("/entities").text
    assert "cleo" in operator.get(f"/entities/{cleo.id}").text


def _visible(page: str) -> str:
    """What a person reads of a page: its text, without tags and their attributes."""
    return html.unescape(re.sub(r"<[^>]+>", " ", re.sub(r"<style>.*?</style>", "", page, flags=re.S)))


def test_a_record_names_its_subject_and_an_entity_what_it_merged_into(rt: Runtime) -> None:
    client = _client(rt, PRINCIPAL_TOKEN)
    record_id = _ids(rt)[0]
    subject = rt.store.get_record(record_id).subject_entity_id  # type: ignore[union-attr]
    assert subject is not None
    page = client.get(f"/records/{record_id}").text
    # The name is shown, and links to the entity whose id it keeps as its tooltip.
    assert re.search(rf'<dt>subject</dt><dd><a href="/entities/{subject}" title="{subject}">aditya</a>'
                     r" / plant_\d</dd>", page)
    assert not re.search(r"\bent_", _visible(page))
    twin = rt.store.create_entity("person", "Aditya Rao", Scope("user", "aditya"))
    rt.store.merge_entities(twin.id, subject, "dana", "the same person")
    merged = client.get(f"/entities/{twin.id}").text
    assert f'into <a href="/entities/{subject}" title="{subject}">aditya</a>' in merged
    assert not re.search(r"\bent_", _visible(merged))


def test_events_read_as_named_fields_not_json(rt: Runtime, world: World) -> None:
    record_id = _ids(rt)[0]
    page = _client(rt, OPERATOR_TOKEN).get(f"/records/{record_id}").text
    created = next(e for e in rt.store.events(record_id=record_id) if e["kind"] == "record.created")
    shown = _visible(page)
    assert re.search(r"origin_scope:\s+user:aditya", shown)
    assert re.search(r"timings_ms\.embed:\s+\d", shown)  # a nested value under a dotted key
    assert f"judge: {created['payload']['judge']}" in re.sub(r"\s+", " ", shown)
    assert "{" not in shown and '"origin_scope"' not in shown
    rt.store.append_event("extraction.run", "extractor", {
        "session_id": "s1", "outcomes": [{"record_id": record_id, "status": "confirmed"}],
        "counts": {"written": 1}})
    session = re.sub(r"\s+", " ", _visible(_client(rt, PRINCIPAL_TOKEN).get("/sessions/s1").text))
    assert f"outcomes[1]: record_id: {record_id}, status: confirmed" in session
    assert "counts.written: 1" in session and "{" not in session


def test_an_operator_grants_and_a_principal_then_reads_the_scope(rt: Runtime) -> None:
    rt.store.write_record(make_record(scope=Scope("project", "apollo"), content="Apollo ships on Friday.",
                                      attribute="ship_day"))
    principal, operator = _client(rt, PRINCIPAL_TOKEN), _client(rt, OPERATOR_TOKEN)
    refused = principal.post("/access/grant", data={"agent": "research-agent", "scope": "project:apollo"})
    assert refused.status_code == 403 and "project:apollo" not in principal.get("/access").text
    assert operator.post("/access/grant", data={"agent": "research-agent", "scope": "project:apollo",
                                                "write": "no"}).status_code == 303
    added = operator.post("/access/add_member", data={"user": "aditya", "scope": "project:apollo"})
    assert added.status_code == 303
    assert rt.store.events(kind="grant.changed")[-1]["actor"] == "operator:dana"
    assert "project:apollo" in principal.get("/access").text
    assert "ships on Friday" in _all_records(principal)  # the same grant the tools honour
    operator.post("/access/remove_member", data={"user": "aditya", "scope": "project:apollo"})
    assert "ships on Friday" not in _all_records(principal)
    bad = operator.post("/access/grant", data={"agent": "a/b", "scope": "project:apollo"})
    assert "invalid_input" in operator.get(bad.headers["location"]).text


def test_a_record_page_shows_the_turn_it_quotes_and_the_searches_that_returned_it(
        rt: Runtime, world: World) -> None:
    world.say("assistant", "What do you use to edit code?")
    record_id = _tool_write(rt, world.p, "I do all my editing in vim.", "Aditya edits code in vim.", "editor",
                            activation="ambient")
    world.say("assistant", "Noted.")
    found = rt.tools.call("memory_search", world.p, {"queries": ["Aditya vim editing"]})
    assert any(r["id"] == record_id for r in found["results"]), found
    rt.flush_search_log()
    page = _client(rt, PRINCIPAL_TOKEN).get(f"/records/{record_id}").text
    assert "What do you use to edit code?" in page and "Noted." in page  # the turns around it
    assert "Aditya vim editing" in page  # the search that returned it
    other = Principal("other-agent", "aditya", "s-other")
    rt.host.grant("other-agent", Scope("user", "aditya"), read=True)
    assert _tool_search_returns(rt, other, record_id)
    rt.flush_search_log()
    operator_page = _client(rt, OPERATOR_TOKEN).get(f"/records/{record_id}").text
    assert operator_page.count("Aditya vim editing") == 2  # both agents' searches
    assert page.count("Aditya vim editing") == 1  # a principal sees its own searches only


def _tool_search_returns(rt: Runtime, principal: Principal, record_id: str) -> bool:
    found = rt.tools.call("memory_search", principal, {"queries": ["Aditya vim editing"]})
    return any(r["id"] == record_id for r in found.get("results", []))


def test_the_access_log_leaves_with_the_search_log_rows(rt: Runtime, world: World) -> None:
    record_id = _ids(rt)[0]
    found = rt.tools.call("memory_search", world.p, {"queries": ["which plant does Aditya water"]})
    assert record_id in {r["id"] for r in found["results"]}, found
    rt.flush_search_log()
    assert [s.query for s in rt.store.searches_returning(record_id, principal=None, limit=5)] == [
        "which plant does Aditya water"]
    world.clock.advance(timedelta(days=rt.config.retention.search_log_days + 1))
    rt.operations.retain()
    assert rt.store.searches_returning(record_id, principal=None, limit=5) == []
    assert rows(world.target, "SELECT count(*) FROM search_returned") == [(0,)]


def test_a_principal_corrects_a_memory_and_the_page_says_how_it_is_activated(rt: Runtime) -> None:
    client = _client(rt, PRINCIPAL_TOKEN)
    old = _ids(rt)[0]
    assert "activation" in client.get(f"/records/{old}").text
    done = client.post(f"/records/{old}/act", data={"action": "supersede", "reason": "moved to Mondays",
                                                    "content": "Aditya waters plant number 0 on Mondays."})
    assert done.status_code == 303 and "supersede: done" in client.get(done.headers["location"]).text
    assert rt.store.get_record(old).status == "superseded"  # type: ignore[union-attr]
    (new,) = rt.store.find_records(supersedes_id=old)
    assert new.content == "Aditya waters plant number 0 on Mondays."
    assert new.creator_agent_id == "research-agent"
    refused = _client(rt, OPERATOR_TOKEN).post(f"/records/{new.id}/act", data={
        "action": "supersede", "reason": "x", "content": "something else"})
    assert "invalid_input" in _client(rt, OPERATOR_TOKEN).get(refused.headers["location"]).text
    assert rt.store.get_record(new.id).status != "superseded"  # type: ignore[union-attr]


def test_a_session_page_shows_its_turns_what_it_wrote_and_to_whom_only(rt: Runtime, world: World) -> None:
    world.say("user", "My ferns need water on Sundays.")
    record_id = _ids(rt)[0]
    # The payload shape Extraction.apply appends for a run.
    rt.store.append_event("extraction.run", "extractor", {
        "session_id": "s1", "outcomes": [{"record_id": record_id, "status": "confirmed"}], "counts": {},
        "hosted": {"extract": {"calls": 1, "input_tokens": 42, "output_tokens": 17},
                   "review": {"calls": 2, "input_tokens": 100, "output_tokens": 3}}})
    rt.hooks.on_turn(Principal("other-agent", "cleo", "s-cleo"), "user", "My passport is in the blue drawer.")
    client = _client(rt, PRINCIPAL_TOKEN)
    assert 'href="/sessions/s1"' in client.get("/sessions").text
    page = client.get("/sessions/s1").text
    assert "My ferns need water on Sundays." in page and "extraction.run" in page
    assert f'href="/records/{record_id}"' in page  # what its extraction wrote
    assert "3 answered, 142 input and 20 output tokens" in page
    assert client.get("/sessions/s-cleo").status_code == 404
    assert "blue drawer" in _client(rt, OPERATOR_TOKEN).get("/sessions/s-cleo").text


def test_leak_probes_through_every_page_find_nothing_of_another_user(rt: Runtime) -> None:
    """Each foreign record is asked for every way a page offers: its id, its words in a
    search and in the records filter, its scope, its entity, its session."""
    rt.host.grant("other-agent", Scope("user", "cleo"), read=True, write=True)
    cleo = Principal("other-agent", "cleo", "s-cleo")
    secrets_ = [f"zephyr{n}" for n in range(12)]
    foreign = []
    for n, word in enumerate(secrets_):
        cleo = rt.hooks.on_turn(cleo, "user", f"My locker code word is {word}.")
        written = rt.tools.call("memory_write", cleo, {
            "type": "semantic", "content": f"Cleo's locker code word is {word}.", "attribute": f"locker_{n}",
            "source_kind": "user_statement", "evidence": f"My locker code word is {word}."})
        foreign.append(str(written["record_id"]))
    entity = rt.store.create_entity("person", "Cleo Marsh", Scope("user", "cleo"))
    client = _client(rt, PRINCIPAL_TOKEN)
    urls = ["/scopes", "/records", "/entities", "/sessions", "/reviews", "/access",
            f"/entities/{entity.id}", "/sessions/s-cleo", "/records?scope=user%3Acleo",
            f"/records?entity={entity.id}"]
    for record_id, word in zip(foreign, secrets_, strict=True):
        urls += [f"/records/{record_id}", f"/records?q={word}", f"/search?q=locker+code+word+{word}",
                 f"/search?q={word}&agent=other-agent&user=cleo"]
    probes = 0
    for url in urls:
        answer = client.get(url)
        probes += 1
        assert answer.status_code in (200, 404), (url, answer.status_code)
        # What a page echoes back (the words asked) is not a leak; the stored sentence is.
        assert not any(f"word is {word}" in answer.text for word in secrets_), url
        assert not any(record_id in answer.text for record_id in foreign), url
        assert "s-cleo" not in answer.text and "Cleo Marsh" not in answer.text, url
    assert probes == len(urls) == 58
    # The same probes as the operator do find them, so the probes can see a leak.
    assert "word is zephyr3" in _client(rt, OPERATOR_TOKEN).get(f"/records/{foreign[3]}").text


def test_a_record_page_shows_its_sensitivity_class_and_whether_it_was_redacted(rt: Runtime) -> None:
    masked = make_record(content="Aditya's passport number is 123-45-6789.", attribute="passport",
                         sensitivity="pii", redacted_content="Aditya's passport number is [pii].")
    rt.store.write_record(masked)
    client = _client(rt, PRINCIPAL_TOKEN)
    page = client.get(f"/records/{masked.id}").text
    assert "<dt>sensitivity</dt><dd>pii · redacted" in page
    assert "123-45-6789" in page  # its reader still sees the raw content
    plain = client.get(f"/records/{_ids(rt)[0]}").text
    assert "<dt>sensitivity</dt><dd>none · not redacted" in plain
