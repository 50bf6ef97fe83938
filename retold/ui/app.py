"""The inspector's web app: server-rendered pages over one runtime, for token holders only.

The app is a composition: one ``PageContext`` (``retold/ui/guard.py``: viewers, the CSRF
and same-site checks, the security headers) shared by every group of pages in
``retold/ui/pages/``. A new group of pages is a module there with ``routes(ctx)`` and one
entry in ``PAGE_GROUPS``.
"""

from __future__ import annotations

from starlette.applications import Starlette

from retold.quality.golden import GoldenFile
from retold.runtime import Runtime
from retold.ui.guard import COOKIE, DAMAGED, PageContext
from retold.ui.pages import access, audit, entities, golden, login, records, reviews, scopes, search, sessions

__all__ = ["COOKIE", "DAMAGED", "PAGE_GROUPS", "create_app"]

PAGE_GROUPS = (login, scopes, records, search, sessions, access, entities, reviews, golden, audit)


def create_app(rt: Runtime, *, golden_set: GoldenFile | None = None) -> Starlette:
    """The inspector over ``rt``, for the tokens in ``rt.config.ui.tokens`` that name its
    tenant; ``golden_set`` is the one golden-set file its labelling page may change."""
    ctx = PageContext(rt, golden_set)
    return Starlette(routes=[route for group in PAGE_GROUPS for route in group.routes(ctx)])
