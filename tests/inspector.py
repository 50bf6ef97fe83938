"""What the inspector's in-process tests share: a runtime whose ``ui.tokens`` let in one
principal (the world's agent and user) and one operator (dana), and a client of the app
that presents one of those tokens."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from starlette.testclient import TestClient

from retold import build_runtime
from retold.runtime import Runtime
from retold.testing import World
from retold.ui.access import token_digest
from retold.ui.app import create_app

__all__ = ["OPERATOR_TOKEN", "PRINCIPAL_TOKEN", "client", "inspector_runtime"]

PRINCIPAL_TOKEN = "principal-token-aditya-0001"
OPERATOR_TOKEN = "operator-token-dana-0001"


@contextmanager
def inspector_runtime(world: World, **ui: Any) -> Iterator[Runtime]:
    """A runtime on ``world``'s store with the two tokens and any other ``ui`` settings."""
    config = world.rt.config.replace({"ui": {**ui, "tokens": [
        {"sha256": token_digest(PRINCIPAL_TOKEN), "agent_id": world.p.agent_id, "user_id": world.p.user_id},
        {"sha256": token_digest(OPERATOR_TOKEN), "operator": "dana"},
    ]}})
    with build_runtime(config, clock=world.clock, embedder=world.embedder, judge=world.judge,
                       environ={}) as opened:
        yield opened


def client(rt: Runtime, token: str | None = None) -> TestClient:
    """The app of ``rt``, presenting ``token`` as a bearer token (none: a browser's first visit)."""
    headers = {"authorization": f"Bearer {token}"} if token else {}
    return TestClient(create_app(rt), headers=headers, follow_redirects=False)
