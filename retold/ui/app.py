"""The inspector's web app: server-rendered pages over one runtime, for token holders only.

The app is a composition: one ``PageContext`` (``retold/ui/guard.py``: viewers, the CSRF
and same-site checks, the security headers) shared by every group of pages in
``retold/ui/pages/``. A new group of pages is a module there with ``routes(ctx)`` and one
entry in ``PAGE_GROUPS``.
"""

from __future__ import annotations

from starlette.applications import Starlette

from retold.runtime import Runtime
from retold.ui.guard import COOKIE, DAMAGED, PageContext
from retold.ui.pages import access, entities, login, records, reviews, scopes, search, sessions

__all__ = ["COOKIE", "DAMAGED", "PAGE_GROUPS", "create_app"]

PAGE_GROUPS = (login, scopes, records, search, sessions, access, entities, reviews)


def create_app(rt: Runtime) -> Starlette:
    """The inspector over ``rt``, for the tokens in ``rt.config.ui.tokens`` that name its
    tenant."""
    ctx = PageContext(rt)
    return Starlette(routes=[route for group in PAGE_GROUPS for route in group.routes(ctx)])
