"""The inspector's pages, one module per group of pages that belong together.

Each module exposes ``routes(ctx) -> list[Route]`` and keeps its handlers at module level,
taking the ``PageContext`` (``retold/ui/guard.py``) explicitly, so a handler reads on its
own and a group can be mounted alone. A page that needs a viewer goes through
``ctx.guarded(handler)``, and one that changes anything through
``ctx.guarded(handler, changes=True)``: the guard owns the token or session check, the
CSRF and same-site check and the answer to a damaged store, so no handler repeats them.
Render with ``ctx.page(...)``, which adds the security headers; after a change, answer
with ``back(...)``.

To add a page group, write ``retold/ui/pages/<group>.py`` with its handlers and
``routes(ctx)``, and add the module to ``PAGE_GROUPS`` in ``retold/ui/app.py``.
"""
