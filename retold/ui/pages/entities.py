"""Entities: those the viewer reads, by kind, and one entity with its aliases, what was
merged into it and what it was merged into."""

from __future__ import annotations

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from retold.models import ENTITY_KINDS
from retold.ui.access import Viewer
from retold.ui.guard import PageContext

__all__ = ["routes"]


async def entity_list(ctx: PageContext, request: Request, viewer: Viewer, csrf: str | None) -> Response:
    kinds = tuple(k for k in request.query_params.getlist("kind") if k in ENTITY_KINDS)
    found = await run_in_threadpool(ctx.inspector.entities, viewer, kinds)
    return ctx.page("entities.html", viewer=viewer, csrf=csrf, entities=found, kinds=ENTITY_KINDS,
                    chosen=kinds)


async def entity(ctx: PageContext, request: Request, viewer: Viewer, csrf: str | None) -> Response:
    found = await run_in_threadpool(ctx.inspector.entity, viewer, request.path_params["entity_id"])
    if found is None:
        return ctx.page("error.html", 404, viewer=viewer, csrf=csrf, message="no such entity")
    return ctx.page("entity.html", viewer=viewer, csrf=csrf, entity=found[0], merged=found[1], into=found[2])


def routes(ctx: PageContext) -> list[Route]:
    return [
        Route("/entities", ctx.guarded(entity_list), methods=["GET"]),
        Route("/entities/{entity_id}", ctx.guarded(entity), methods=["GET"]),
    ]
