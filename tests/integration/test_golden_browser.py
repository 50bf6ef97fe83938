"""A golden set labelled in a real browser: Debian's Chromium driven by Playwright against
``retold ui --golden FILE`` over a real store.

The set is captured from the store's search log with the command; an operator labels
every item on the inspector's labelling page, partly with the keyboard (the page's access
shortcuts), freezes the set there, and ``retold eval`` runs it twice, the second run compared
with the first. A principal's token cannot open the page. Screenshots go to the test's
folder (or ``RETOLD_UI_SHOTS``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = pytest.mark.browser

from retold.quality.golden import read_golden  # noqa: E402
from retold.ui.access import token_digest  # noqa: E402
from tests.browser import ROOT, chromium, inspector  # noqa: E402
from tests.golden_world import QUESTIONS, GoldenWorld, build  # noqa: E402

OPERATOR, PRINCIPAL = "golden-operator-token-1", "golden-principal-token-1"
ANSWERS = {"drink": ["drink"], "manager": ["manager"], "billing": ["marcus"], "phone": ["phone"],
           "tower": [], "deploy": ["deploy"], "cat": ["cat"], "allergy": []}


def retold(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "retold.cli", *args], capture_output=True, text=True,
                          timeout=180, cwd=ROOT, env={**os.environ, "HF_HUB_OFFLINE": "1"})


@dataclass
class Served:
    url: str
    world: GoldenWorld
    config: Path
    golden: Path


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    gw = build(tmp_path, str(tmp_path / "memory.sqlite"))
    gw.ask_all()
    gw.world.rt.close()
    config = yaml.safe_load(gw.config.read_text())
    config["ui"] = {"tokens": [{"sha256": token_digest(OPERATOR), "operator": "olga"},
                               {"sha256": token_digest(PRINCIPAL), "agent_id": "research-agent",
                                "user_id": "aditya"}]}
    gw.config.write_text(yaml.safe_dump(config))
    golden = tmp_path / "release.jsonl"
    captured = retold("golden", "capture", "--config", str(gw.config), "--out", str(golden))
    assert captured.returncode == 0, captured.stderr
    with inspector("--config", str(gw.config), "--golden", str(golden)) as url:
        yield Served(url, gw, gw.config, golden)


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    with chromium(tmp_path / "profile") as context:
        yield context


def _log_in(page: Any, url: str, token: str) -> None:
    page.goto(f"{url}/login")
    page.fill("input[name=token]", token)
    page.click("button:has-text('Log in')")
    page.wait_for_url(f"{url}/scopes")


def _shot(page: Any, tmp_path: Path, name: str) -> None:
    folder = Path(os.environ.get("RETOLD_UI_SHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(folder / f"{name}.png"), full_page=True)


def test_an_operator_labels_and_freezes_a_set_in_the_browser_and_eval_compares_runs(
        served: Served, browser: Any, tmp_path: Path) -> None:
    keys = {question: key for key, _, _, question in QUESTIONS}
    ids = served.world.ids
    page = browser.new_page()
    _log_in(page, served.url, OPERATOR)
    page.goto(f"{served.url}/golden")
    assert f"{len(QUESTIONS)} to label" in page.content()
    page.click("text=Label the next item")
    by_keyboard = 0
    for _ in QUESTIONS:
        question = page.inner_text("h1")
        expected = [ids[k] for k in ANSWERS[keys[question]]]
        boxes = page.locator("input[name=expect]")
        values = [boxes.nth(n).get_attribute("value") for n in range(boxes.count())]
        if expected:
            assert set(expected) <= set(values), question
            for rid in expected:
                position = values.index(rid) + 1
                if position < 10 and by_keyboard < 3:
                    page.keyboard.press(str(position))  # the candidate's shortcut
                    by_keyboard += 1
                else:
                    page.check(f"input[name=expect][value='{rid}']")
                assert page.is_checked(f"input[name=expect][value='{rid}']")
        else:
            page.keyboard.press("n")
            assert page.is_checked("input[name=nothing]")
        if keys[question] == "billing":
            page.keyboard.press("a")  # into the answer field: what is typed there stays there
            page.keyboard.type("Marcus Chen")
            page.keyboard.press("Escape")
            _shot(page, tmp_path, "golden_item")
        page.keyboard.press("s")  # save, and on to the next item to label
        page.wait_for_selector("text=labelled")
    assert by_keyboard == 3
    page.wait_for_url(f"{served.url}/golden?*")
    assert "every item is labelled" in page.content()
    page.click("button:has-text('Freeze the set')")
    page.wait_for_selector("text=frozen:")
    _shot(page, tmp_path, "golden")

    golden = read_golden(served.golden)
    assert golden.header.frozen is not None and all(item.labelled for item in golden.items)
    for item in golden.items:
        assert list(item.expected) == [ids[k] for k in ANSWERS[keys[item.question[0]]]]
        assert item.nothing_stored == (not ANSWERS[keys[item.question[0]]])
    billing = next(item for item in golden.items if keys[item.question[0]] == "billing")
    assert billing.answer == "Marcus Chen"

    # A frozen set's page shows the labels and takes no more.
    page.goto(f"{served.url}/golden/{billing.id}")
    assert "labels no longer change" in page.content()
    assert page.locator("button:has-text('Save and next')").count() == 0

    reports = tmp_path / "reports"
    steady = ("--tolerance", "search_p50_ms=10000%")
    first = retold("eval", str(served.golden), "--config", str(served.config), "--report-dir", str(reports),
                   *steady)
    assert first.returncode == 0, first.stderr
    assert "recall@10 1," in first.stdout and "leaks 0" in first.stdout
    second = retold("eval", str(served.golden), "--config", str(served.config), "--report-dir", str(reports),
                    *steady)
    assert second.returncode == 0, second.stderr
    assert "compared with eval-" in second.stdout


def test_a_principal_cannot_open_the_labelling_page(served: Served, browser: Any) -> None:
    page = browser.new_page()
    _log_in(page, served.url, PRINCIPAL)
    assert "Golden set" not in page.inner_text("header")
    answer = page.goto(f"{served.url}/golden")
    assert answer is not None and answer.status == 403
    assert "operator" in page.content()
    before = served.golden.read_text()
    posted = page.request.post(f"{served.url}/golden/q0001", form={"nothing": "yes"})
    assert posted.status == 403  # no CSRF token, and not an operator either way
    assert served.golden.read_text() == before
