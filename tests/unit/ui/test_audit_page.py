"""The extraction audit's inspector page over a real store, through HTTP: an operator sees
each waiting record beside the turn its evidence came from and answers the three
questions; a principal is refused; a browser's answer needs its page's CSRF token; an
incomplete answer, or one for a record never sampled, changes nothing."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("starlette")

from retold.quality.audit import sample_for_audit  # noqa: E402
from retold.runtime import Runtime  # noqa: E402
from retold.testing import World, make_world  # noqa: E402
from tests.extracted import extract_facts  # noqa: E402
from tests.inspector import OPERATOR_TOKEN, PRINCIPAL_TOKEN, inspector_runtime  # noqa: E402
from tests.inspector import client as _client  # noqa: E402

ANSWER = {"true": "yes", "atomic": "no", "keep": "yes"}


@pytest.fixture
def world(tmp_path: Path, store_target: str) -> Iterator[World]:
    made = make_world(tmp_path, store=store_target)
    extract_facts(made, "lockers", 3)
    sample_for_audit(made.rt.store, 0.0)
    yield made
    made.rt.close()


@pytest.fixture
def rt(world: World) -> Iterator[Runtime]:
    with inspector_runtime(world) as opened:
        yield opened


def _waiting(rt: Runtime) -> list[str]:
    return [item.record_id for item in rt.store.audit_items()]


def test_an_operator_reads_each_record_beside_its_evidence_and_answers_it(rt: Runtime) -> None:
    client = _client(rt, OPERATOR_TOKEN)
    first, *rest = _waiting(rt)

    page = client.get("/audit")

    assert page.status_code == 200
    for n in range(3):
        assert f"Aditya&#39;s gym locker {n} has code {1000 + n}." in page.text
        assert f"My locker at the gym is number {n} and the code is {1000 + n} for it." in page.text
    assert "turn 1 · user" in page.text and "3 waiting" in page.text
    assert page.text.count('name="true" value="yes"') == 3

    done = client.post(f"/audit/{first}", data=ANSWER)

    assert done.status_code == 303 and done.headers["location"].startswith("/audit?done=")
    item = rt.store.audit_item(first)
    assert item is not None and item.verdicts is not None
    assert (item.verdicts.true, item.verdicts.atomic, item.verdicts.keep) == (True, False, True)
    assert item.answered_by == "operator:dana"
    assert _waiting(rt) == rest
    after = client.get(done.headers["location"]).text
    assert "1 answered (sampled in the last 28 days): true 100%, atomic 0%, worth keeping 100%" in after
    assert "2 waiting" in after and after.count('name="true" value="yes"') == 2


def test_a_principal_neither_sees_nor_answers_the_audit(rt: Runtime) -> None:
    client = _client(rt, PRINCIPAL_TOKEN)
    first = _waiting(rt)[0]

    assert client.get("/audit").status_code == 403
    assert client.post(f"/audit/{first}", data=ANSWER).status_code == 403
    assert first in _waiting(rt)
    assert "locker" not in client.get("/audit").text


def test_a_browser_answers_only_with_its_pages_csrf_token(rt: Runtime) -> None:
    browser = _client(rt)
    assert browser.post("/login", data={"token": OPERATOR_TOKEN}).status_code == 303
    first = _waiting(rt)[0]
    page = browser.get("/audit").text
    csrf = re.search(r'name="csrf" value="([^"]+)"', page)
    assert csrf is not None

    assert browser.post(f"/audit/{first}", data=ANSWER).status_code == 403
    forged = browser.post(f"/audit/{first}", headers={"origin": "https://evil.example"},
                          data={**ANSWER, "csrf": csrf.group(1)})
    assert forged.status_code == 403 and first in _waiting(rt)
    assert browser.post(f"/audit/{first}", data={**ANSWER, "csrf": csrf.group(1)}).status_code == 303
    assert first not in _waiting(rt)


def test_an_incomplete_or_unknown_answer_changes_nothing(rt: Runtime, world: World) -> None:
    client = _client(rt, OPERATOR_TOKEN)
    first = _waiting(rt)[0]

    partial = client.post(f"/audit/{first}", data={"true": "yes", "atomic": "maybe"})
    assert partial.status_code == 303 and "failed=" in partial.headers["location"]
    assert "answer all three questions" in client.get(partial.headers["location"]).text
    unknown = client.post("/audit/no-such-record", data=ANSWER)
    assert unknown.status_code == 404 and "never sampled" in unknown.text
    assert len(_waiting(rt)) == 3 and world.events("audit.answered") == []
