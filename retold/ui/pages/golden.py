"""The labelling page: a golden set's items one at a time, each with its question and the
candidates its search returned (text and evidence), labelled with the expected records or
"nothing stored answers this" and an optional answer text, then the set frozen.

The file is the one ``retold ui --golden FILE`` named; the browser never names a path. Only
an operator labels: a set holds the questions and candidates of every principal it was
captured from, more than any one principal's token may read. The item page is the one
inspector page that runs a script: its keyboard shortcuts (``retold/ui/static/golden_keys.js``:
digits tick candidates, ``n`` nothing stored, ``a`` the answer, ``s`` save and go to the
next item not labelled, ``j``/``k`` the next and previous item), a file of this origin that
its content policy allows and nothing else (no inline script).
"""

from __future__ import annotations

from functools import cache
from importlib import resources

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from retold.errors import GoldenSetError
from retold.quality.golden import GoldenItem, GoldenSet
from retold.ui.access import Viewer
from retold.ui.guard import HEADERS, PageContext, back

__all__ = ["routes"]

# The inspector's policy, with this origin's own script files allowed (the shortcuts).
SCRIPTED = {"Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'unsafe-inline';"
                                      " form-action 'self'; frame-ancestors 'none'"}
NO_SET = "no golden set is open here: start the inspector with `retold ui --golden FILE`"
OPERATORS_ONLY = ("labelling is an operator's work: a golden set holds the questions and candidates of"
                  " every principal it was captured from")


def _refused(ctx: PageContext, viewer: Viewer, csrf: str | None) -> Response | None:
    """The page that answers instead, when there is no set or the viewer may not label."""
    if ctx.golden is None:
        return ctx.page("error.html", 404, viewer=viewer, csrf=csrf, message=NO_SET)
    if not viewer.is_operator:
        return ctx.page("error.html", 403, viewer=viewer, csrf=csrf, message=OPERATORS_ONLY)
    return None


def _next_unlabelled(golden: GoldenSet, after: str | None = None) -> GoldenItem | None:
    """The first item not labelled after ``after`` (wrapping round), or None."""
    ids = [item.id for item in golden.items]
    start = ids.index(after) + 1 if after in ids else 0
    for item in golden.items[start:] + golden.items[:start]:
        if not item.labelled:
            return item
    return None


async def overview(ctx: PageContext, request: Request, viewer: Viewer, csrf: str | None) -> Response:
    if (refused := _refused(ctx, viewer, csrf)) is not None:
        return refused
    assert ctx.golden is not None
    golden = await run_in_threadpool(ctx.golden.read)
    return ctx.page("golden.html", viewer=viewer, csrf=csrf, golden=golden, file_name=ctx.golden.path.name,
                    first=_next_unlabelled(golden), done=request.query_params.get("done"),
                    failed=request.query_params.get("failed"))


async def item_page(ctx: PageContext, request: Request, viewer: Viewer, csrf: str | None) -> Response:
    if (refused := _refused(ctx, viewer, csrf)) is not None:
        return refused
    assert ctx.golden is not None
    golden = await run_in_threadpool(ctx.golden.read)
    ids = [item.id for item in golden.items]
    item_id = request.path_params["item_id"]
    if item_id not in ids:
        return ctx.page("error.html", 404, viewer=viewer, csrf=csrf, message=f"no item {item_id} in this set")
    at = ids.index(item_id)
    following = ids[at + 1] if at + 1 < len(ids) else None
    return ctx.page("golden_item.html", headers=SCRIPTED, viewer=viewer, csrf=csrf, golden=golden,
                    item=golden.items[at],
                    previous=ids[at - 1] if at else None, following=following,
                    position=at + 1, done=request.query_params.get("done"),
                    failed=request.query_params.get("failed"))


async def label_item(ctx: PageContext, request: Request, viewer: Viewer, csrf: str | None) -> Response:
    if (refused := _refused(ctx, viewer, csrf)) is not None:
        return refused
    assert ctx.golden is not None
    item_id = request.path_params["item_id"]
    form = await request.form()
    expected = [str(value) for value in form.getlist("expect")]
    nothing = form.get("nothing") == "yes"
    answer = str(form.get("answer") or "").strip() or None
    try:
        golden = await run_in_threadpool(ctx.golden.label, item_id, expected=expected, nothing_stored=nothing,
                                         answer=answer)
    except GoldenSetError as exc:
        return back(f"/golden/{item_id}", False, str(exc))
    following = _next_unlabelled(golden, item_id)
    if following is None:
        return back("/golden", True, f"labelled {item_id}; every item is labelled")
    return RedirectResponse(f"/golden/{following.id}?done=labelled+{item_id}", status_code=303,
                            headers=HEADERS)


async def freeze_set(ctx: PageContext, request: Request, viewer: Viewer, csrf: str | None) -> Response:
    if (refused := _refused(ctx, viewer, csrf)) is not None:
        return refused
    assert ctx.golden is not None
    try:
        golden = await run_in_threadpool(ctx.golden.freeze, ctx.rt.clock.now())
    except GoldenSetError as exc:
        return back("/golden", False, str(exc))
    assert golden.header.frozen is not None
    return back("/golden", True, f"frozen: {len(golden.items)} items, sha256 {golden.header.frozen.sha256}")


@cache
def _shortcuts() -> str:
    return resources.files("retold.ui").joinpath("static/golden_keys.js").read_text(encoding="utf-8")


async def shortcuts(ctx: PageContext, request: Request, viewer: Viewer, csrf: str | None) -> Response:
    """The item page's keyboard shortcuts: code only, the same for every viewer."""
    return Response(_shortcuts(), media_type="text/javascript", headers=HEADERS)


def routes(ctx: PageContext) -> list[Route]:
    return [
        Route("/golden-keys.js", ctx.guarded(shortcuts), methods=["GET"]),
        Route("/golden", ctx.guarded(overview), methods=["GET"]),
        Route("/golden/freeze", ctx.guarded(freeze_set, changes=True), methods=["POST"]),
        Route("/golden/{item_id}", ctx.guarded(item_page), methods=["GET"]),
        Route("/golden/{item_id}", ctx.guarded(label_item, changes=True), methods=["POST"]),
    ]
