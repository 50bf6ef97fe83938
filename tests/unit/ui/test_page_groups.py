"""A group of inspector pages mounted alone brings the guard with it: the same 401, login
redirect and security headers as the whole app, and only its own pages."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("starlette")
from starlette.applications import Starlette  # noqa: E402
from starlette.testclient import TestClient  # noqa: E402

from retold.testing import AGENT, make_world  # noqa: E402
from retold.ui.access import token_digest  # noqa: E402
from retold.ui.guard import PageContext  # noqa: E402
from retold.ui.pages import records  # noqa: E402

TOKEN = "records-only-token-0001"


def test_the_records_group_alone_lets_in_only_a_known_token(tmp_path: Path) -> None:
    world = make_world(tmp_path, config={"ui": {"tokens": [
        {"sha256": token_digest(TOKEN), "agent_id": AGENT, "user_id": "aditya"}]}})
    assert world.write(content="Aditya waters the fern on Sundays.", attribute="fern").ok
    app = Starlette(routes=records.routes(PageContext(world.rt)))
    anonymous = TestClient(app, follow_redirects=False)

    refused = anonymous.get("/records")
    assert refused.status_code == 401 and refused.headers["www-authenticate"].startswith("Bearer")
    assert "fern" not in refused.text
    sent = anonymous.get("/records", headers={"accept": "text/html"})
    assert sent.status_code == 303 and sent.headers["location"] == "/login"

    holder = TestClient(app, headers={"authorization": f"Bearer {TOKEN}"}, follow_redirects=False)
    listed = holder.get("/records")
    assert listed.status_code == 200 and "waters the fern" in listed.text
    assert listed.headers["x-frame-options"] == "DENY" and listed.headers["cache-control"] == "no-store"
    assert holder.get("/scopes").status_code == 404  # another group's page is not mounted
