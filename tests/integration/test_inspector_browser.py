"""The inspector in a real browser: Debian's Chromium driven by Playwright against a real
``retold ui`` process over a real store.

A principal logs in through the form and sees only its own user's memory on every page,
follows a superseded fact's lineage, runs a search and reads why a record is there,
forgets and restores a record, and resolves a review; a page on another site that posts
a forged form to the inspector changes nothing; a visitor without a token is sent to the
login page; an operator answers the extraction audit. Screenshots of the main pages are
written to the test's folder (set ``RETOLD_UI_SHOTS`` to a folder to keep them, as
docs/images/ was made).
"""

from __future__ import annotations

import http.server
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.browser

from retold import build_runtime, load_config  # noqa: E402
from retold.models import Principal, Scope  # noqa: E402
from retold.quality.audit import sample_for_audit  # noqa: E402
from retold.testing import make_record, make_world  # noqa: E402
from retold.ui.access import token_digest  # noqa: E402
from tests.browser import chromium, inspector  # noqa: E402
from tests.extracted import extract_facts  # noqa: E402
from tests.ports import free_port  # noqa: E402
from tests.sql import rows  # noqa: E402

TOKEN, OPERATOR = "browser-principal-token-1", "browser-operator-token-1"
FOREIGN = "Cleo keeps her passport in the blue drawer."


@dataclass
class Served:
    url: str
    path: str
    ids: dict[str, str]
    config: Path
    principal: Principal


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    world = make_world(tmp_path / "w")
    rt = world.rt

    def write(quote: str, content: str, attribute: str) -> str:
        """What an agent does: the user says it, the agent writes it quoting them, and it
        is confirmed (so it is live whatever the date the server runs at)."""
        world.say("user", quote)
        written = rt.tools.call("memory_write", world.p, {
            "type": "semantic", "content": content, "attribute": attribute, "source_kind": "user_statement",
            "evidence": quote})
        rt.tools.call("memory_revise", world.p, {"id": written["record_id"], "action": "confirm",
                                                 "reason": "the user said so"})
        return str(written["record_id"])

    old = write("Dana Reyes is my billing contact.", "Aditya's billing contact is Dana Reyes.",
                "billing_contact")
    world.say("user", "Marcus Chen handles billing now, not Dana.")
    revised = rt.tools.call("memory_revise", world.p, {
        "id": old, "action": "supersede", "reason": "handed over",
        "content": "Aditya's billing contact is Marcus Chen.", "source_kind": "user_statement",
        "evidence": "Marcus Chen handles billing now, not Dana."})
    assert "error" not in revised, revised
    plain = write("I do all my editing in vim.", "Aditya edits code in vim.", "editor")
    ferns = write("I water the ferns every Sunday.", "Aditya waters the ferns every Sunday.", "ferns")
    world.say("assistant", "Noted: ferns on Sundays.")
    rt.store.write_record(make_record(scope=Scope("user", "cleo"), content=FOREIGN, attribute="passport",
                                      creator_agent_id="other-agent"))
    path = rt.store.path
    rt.close()
    config = _config(tmp_path, world.embedder, (
        f"    - sha256: {token_digest(TOKEN)}\n      agent_id: {world.p.agent_id}\n"
        f"      user_id: {world.p.user_id}\n"))
    with inspector("--store", path, "--config", str(config)) as url:
        yield Served(url, path, {"old": old, "plain": plain, "ferns": ferns}, config,
                     Principal(world.p.agent_id, world.p.user_id))


@pytest.fixture
def audited(tmp_path: Path) -> Iterator[tuple[str, str, list[str]]]:
    """An inspector over a store whose extraction audit holds two sampled records: its
    URL, the store's path and the records' ids."""
    world = make_world(tmp_path / "w")
    extract_facts(world, "lockers", 2)
    sampled = list(sample_for_audit(world.rt.store, 0.0).added)
    path = world.rt.store.path
    world.rt.close()
    with inspector("--store", path, "--config", str(_config(tmp_path, world.embedder, ""))) as url:
        yield url, path, sampled


def _config(tmp_path: Path, embedder: Any, tokens: str) -> Path:
    """A config for the fake embedder with ``tokens`` (YAML list items) and the operator's."""
    config = tmp_path / "config.yaml"
    config.write_text(
        f"embedding:\n  model: fake\n  version: {embedder.version}\n  dims: {embedder.dims}\n"
        f"ui:\n  tokens:\n{tokens}    - sha256: {token_digest(OPERATOR)}\n      operator: dana\n")
    return config


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    with chromium(tmp_path / "profile") as context:
        yield context


def _shot(page: Any, tmp_path: Path, name: str) -> None:
    folder = Path(os.environ.get("RETOLD_UI_SHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(folder / f"{name}.png"), full_page=True)


def _log_in(page: Any, url: str, token: str) -> None:
    page.goto(f"{url}/records")
    assert page.url.endswith("/login")  # no token yet: the login page, not the records
    page.fill("input[name=token]", token)
    page.click("button:has-text('Log in')")
    page.wait_for_url(f"{url}/scopes")


def test_a_principal_browses_searches_and_changes_only_its_own_memory(
        served: Served, browser: Any, tmp_path: Path) -> None:
    page = browser.new_page()
    _log_in(page, served.url, TOKEN)
    _shot(page, tmp_path, "scopes")
    seen = [page.content()]

    page.goto(f"{served.url}/records")
    seen.append(page.content())
    _shot(page, tmp_path, "records")
    assert "Aditya edits code in vim." in page.content()

    # A superseded fact's page links to what replaced it.
    page.goto(f"{served.url}/records/{served.ids['old']}")
    assert "superseded by" in page.content()
    page.click("text=superseded by >> xpath=.. >> a")
    assert "Marcus Chen" in page.content()
    seen.append(page.content())

    # A search shows its decision and every candidate's votes.
    page.goto(f"{served.url}/search")
    page.fill("input[name=q]", "what does Aditya use to edit code")
    page.click("button:has-text('Search')")
    page.wait_for_selector("text=Decision")
    assert "beyond_names" in page.content() and "vim" in page.content()
    _shot(page, tmp_path, "search")
    seen.append(page.content())

    # Forget, then restore, from the record page.
    page.goto(f"{served.url}/records/{served.ids['plain']}")
    _shot(page, tmp_path, "record")
    page.select_option("select[name=action]", "forget")
    page.fill("input[name=reason]", "no longer true")
    page.click("button:has-text('Apply')")
    page.wait_for_selector("text=Forgotten")
    assert _status(served, "plain") == "deleted"
    page.select_option("select[name=action]", "restore")
    page.fill("input[name=reason]", "it was true after all")
    page.click("button:has-text('Apply')")
    page.wait_for_selector("text=Aditya edits code in vim.")
    assert _status(served, "plain") == "confirmed"

    # Resolve a review.
    page.goto(f"{served.url}/reviews")
    seen.append(page.content())
    assert "waters the ferns" in page.content()
    page.fill("input[name=reason]", "always worth knowing")
    page.select_option("select[name=resolution]", "ambient")
    page.click("button:has-text('Resolve')")
    page.wait_for_selector("text=resolved as ambient")
    assert rows(served.path, "SELECT activation FROM record_activation WHERE record_id = ?",
                served.ids["ferns"]) == [("ambient",)]

    for page_html in seen + [page.content()]:
        assert "blue drawer" not in page_html and "user:cleo" not in page_html


def test_a_forged_form_from_another_site_changes_nothing(served: Served, browser: Any,
                                                         tmp_path: Path) -> None:
    page = browser.new_page()
    _log_in(page, served.url, TOKEN)
    target = f"{served.url}/records/{served.ids['plain']}/act"
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "index.html").write_text(
        f'<form id="f" method="post" action="{target}"><input name="action" value="forget">'
        '<input name="reason" value="forged"></form><script>document.getElementById("f").submit()</script>')
    other = _serve_folder(tmp_path / "site")
    page.goto(other)
    page.wait_for_load_state()
    time.sleep(0.5)
    assert _status(served, "plain") == "confirmed"


def test_an_operator_sees_every_scope(served: Served, browser: Any, tmp_path: Path) -> None:
    page = browser.new_page()
    _log_in(page, served.url, OPERATOR)
    assert "user:cleo" in page.content()
    page.goto(f"{served.url}/records?scope=user%3Acleo")
    assert "blue drawer" in page.content()


def test_the_search_page_and_memory_search_agree_on_order_and_scores(served: Served, browser: Any) -> None:
    """The same question through the page in Chromium and through memory_search on the
    same store: the records the model reads, in its order, with its scores, and a lexical
    part above zero wherever its block says lexical matched."""
    question = "which editor does Aditya use for code"
    page = browser.new_page()
    _log_in(page, served.url, TOKEN)
    page.goto(f"{served.url}/search")
    page.fill("input[name=q]", question)
    page.click("button:has-text('Search')")
    page.wait_for_selector("text=Decision")
    rows = page.eval_on_selector_all("tr.candidate", """rows => rows.map(r => ({
        id: r.dataset.id, score: r.querySelector('td.score').innerText.trim(),
        lexical: r.querySelector('td.lexical').innerText.trim(),
        lexical_part: r.querySelector('td.lexical .part')?.dataset.part,
        returned: r.lastElementChild.innerText.trim()}))""")
    config = load_config(served.config, overrides={"store": {"path": served.path}})
    with build_runtime(config) as rt:
        tool = rt.tools.call("memory_search", served.principal, {"queries": [question]})
    assert tool["results"], tool
    answered = [(r["id"], f"{r['score']:.3f}") for r in tool["results"]]
    assert [(r["id"], r["score"]) for r in rows[:len(answered)]] == answered
    assert all(r["returned"] == "yes" for r in rows[:len(answered)])
    assert not any(r["returned"] == "yes" for r in rows[len(answered):])
    assert page.inner_text("pre") == tool["rendered"]  # the block the model reads, word for word
    matched = [r for r in tool["results"] if "lexical" in r["explanation"]["matched_by"]]
    assert matched  # the question shares words with what was returned
    shown = {r["id"]: r for r in rows}
    for result in matched:
        row, rank = shown[result["id"]], result["explanation"]["lexical"]["rank"]
        # What lexical added to the sum, however small, never reads as zero.
        assert float(row["lexical_part"]) > 0 and not row["lexical"].startswith("+0.000")
        assert f"rank {rank}" in row["lexical"]


def test_a_visitor_opening_the_inspector_is_sent_to_log_in(served: Served, browser: Any) -> None:
    page = browser.new_page()
    opened = page.goto(f"{served.url}/")
    assert opened is not None and opened.status == 200 and page.url == f"{served.url}/login"
    page.fill("input[name=token]", OPERATOR)
    page.click("button:has-text('Log in')")
    page.wait_for_url(f"{served.url}/scopes")
    page.goto(f"{served.url}/")
    assert page.url == f"{served.url}/scopes"
    # A record's page names its subject and reads its events as fields, not JSON.
    page.goto(f"{served.url}/records/{served.ids['plain']}")
    assert page.inner_text("dt:has-text('subject') + dd") == "aditya / editor"
    events = page.inner_text("h2:has-text('Events') + table")
    assert "origin_scope: user:aditya" in events and "{" not in events


def test_an_operator_answers_the_extraction_audit_from_its_page(
        audited: tuple[str, str, list[str]], browser: Any, tmp_path: Path) -> None:
    url, path, (first, second) = audited
    page = browser.new_page()
    _log_in(page, url, OPERATOR)
    page.click("header >> text=Audit")
    page.wait_for_url(f"{url}/audit")
    assert "2 waiting" in page.content()
    assert "My locker at the gym is number 0 and the code is 1000 for it." in page.content()
    _shot(page, tmp_path, "audit")
    row = page.locator(f"#audit-{first}")
    for name, value in (("true", "yes"), ("atomic", "yes"), ("keep", "no")):
        row.locator(f"input[name={name}][value={value}]").check()
    row.locator("button:has-text('Answer')").click()
    page.wait_for_selector("text=answered")
    assert "1 waiting" in page.content() and page.locator(f"#audit-{second}").count() == 1
    assert rows(path, "SELECT verdict_true, verdict_atomic, verdict_keep, answered_by FROM audit_items"
                " WHERE record_id = ?", first) == [(1, 1, 0, "operator:dana")]


def _status(served: Served, name: str) -> str:
    ((status,),) = rows(served.path, "SELECT status FROM records WHERE id = ?", served.ids[name])
    return str(status)


def _serve_folder(folder: Path) -> str:
    """A second site on another port (another origin) serving ``folder``."""
    port = free_port()
    handler = lambda *a: http.server.SimpleHTTPRequestHandler(*a, directory=str(folder))  # noqa: E731
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{port}/index.html"

