"""Who is looking: the inspector's tokens, viewers and browser sessions.

A token (kept in config only as its SHA-256) stands for a principal, who sees exactly what
that principal's ``memory_get`` would show, or for an operator, who sees every scope.
Scripts send it on every request (``Authorization: Bearer``); a browser sends it once to
the login form and then carries a random session id in an HttpOnly cookie. Sessions live
in this process only, so restarting the inspector logs every browser out.

A change from a browser must carry the session's CSRF token in its form: a cookie is sent
by the browser whatever page started the request, a form field only by our own pages. A
bearer request needs none, since no other site can make a browser add that header.
"""

from __future__ import annotations

import hmac
import secrets
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

from retold.config import UiTokenConfig
from retold.config.tokens import token_digest
from retold.models import Principal

__all__ = ["BrowserSession", "Sessions", "TokenBook", "Viewer", "same_token", "token_digest"]

SESSION_SECONDS = 8 * 3600  # a browser session ends after a working day, whatever it did


@dataclass(frozen=True)
class Viewer:
    """Whom a token stands for. ``principal`` is None for an operator."""

    name: str  # what events record as the actor of a change made here
    principal: Principal | None

    @property
    def is_operator(self) -> bool:
        return self.principal is None

    @property
    def label(self) -> str:
        if self.principal is None:
            return f"operator {self.name}"
        p = self.principal
        return f"{p.agent_id} for {p.user_id}" + (f" in {p.project_id}" if p.project_id else "")


class TokenBook:
    """Maps a presented token to its viewer by the token's SHA-256.

    Comparing digests rather than tokens means a timing difference can reveal at most the
    digest of the caller's own guess, never a configured token."""

    def __init__(self, tokens: Sequence[UiTokenConfig]) -> None:
        self._by_digest: dict[str, Viewer] = {}
        for t in tokens:
            if t.operator is not None:
                self._by_digest[t.sha256] = Viewer(f"operator:{t.operator}", None)
            else:
                principal = Principal(t.agent_id, t.user_id, project_id=t.project_id)
                self._by_digest[t.sha256] = Viewer(t.agent_id, principal)

    def __len__(self) -> int:
        return len(self._by_digest)

    def viewer(self, token: str) -> Viewer | None:
        return self._by_digest.get(token_digest(token)) if token else None


@dataclass(frozen=True)
class BrowserSession:
    viewer: Viewer
    csrf: str
    expires: float


class Sessions:
    """Browser sessions by their random id, each with its own CSRF token."""

    def __init__(self) -> None:
        self._sessions: dict[str, BrowserSession] = {}
        self._lock = threading.Lock()

    def open(self, viewer: Viewer) -> tuple[str, BrowserSession]:
        session_id = secrets.token_urlsafe(32)
        session = BrowserSession(viewer, secrets.token_urlsafe(32), time.monotonic() + SESSION_SECONDS)
        with self._lock:
            self._sessions[session_id] = session
        return session_id, session

    def get(self, session_id: str | None) -> BrowserSession | None:
        if not session_id:
            return None
        with self._lock:
            session = self._sessions.get(session_id)
            if session is not None and session.expires < time.monotonic():
                del self._sessions[session_id]
                return None
        return session

    def close(self, session_id: str | None) -> None:
        with self._lock:
            self._sessions.pop(session_id or "", None)


def same_token(given: str | None, expected: str) -> bool:
    """A CSRF token check that takes the same time whatever ``given`` holds."""
    return given is not None and hmac.compare_digest(given.encode(), expected.encode())
