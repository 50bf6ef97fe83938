"""Query rewriting, stage 1 of the read path (LLD 10.0).

A rewriter turns the agent's raw queries into standalone search queries using only those
queries and the host-supplied current-turn context: it never sees candidates, the store
or earlier results. :func:`rewrite_stage` wraps any rewriter so that a disabled, slow,
failing or misbehaving rewriter can only ever cost the rewrite, never the search: the
raw queries proceed and the status says why.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future
from typing import Protocol

from retold.config import RewriteConfig
from retold.errors import RetoldError
from retold.models import RewriteResult, RewriteStatus

__all__ = [
    "FakeRewriter",
    "NoRewriter",
    "QueryRewriter",
    "RewriteError",
    "rewrite_stage",
]

log = logging.getLogger("retold.retrieve")


class RewriteError(RetoldError):
    """A query rewriter could not produce a usable rewrite (LLD 10.0)."""


class QueryRewriter(Protocol):
    """Rewrites raw queries into standalone queries from the queries and context alone."""

    def rewrite(self, queries: list[str], context: str | None) -> RewriteResult:
        """Return exactly one rewritten query per input query, in the same order."""
        ...


class NoRewriter:
    """The rewriter used when rewriting is off: it hands the queries back untouched."""

    def rewrite(self, queries: list[str], context: str | None) -> RewriteResult:
        """Return a copy of ``queries`` with status ``unchanged``."""
        return RewriteResult(list(queries), "unchanged")


class FakeRewriter:
    """A deterministic rewriter for tests (LLD 17.4).

    Returns ``output`` (or echoes the queries when ``output`` is None), raises ``fail``
    when given, and sleeps ``delay_s`` first so timeouts can be exercised. Every call's
    arguments are kept in ``calls`` so a test can prove what the rewriter was shown.
    """

    def __init__(
        self,
        output: list[str] | None = None,
        *,
        fail: Exception | None = None,
        delay_s: float = 0.0,
    ) -> None:
        self.output = output
        self.fail = fail
        self.delay_s = delay_s
        self.calls: list[tuple[list[str], str | None]] = []

    def rewrite(self, queries: list[str], context: str | None) -> RewriteResult:
        """Record the call, wait ``delay_s``, then raise ``fail`` or return ``output``."""
        self.calls.append((list(queries), context))
        if self.delay_s > 0:
            time.sleep(self.delay_s)
        if self.fail is not None:
            raise self.fail
        if self.output is None:
            return RewriteResult(list(queries), "unchanged")
        return RewriteResult(list(self.output), "applied")


def rewrite_stage(
    rewriter: QueryRewriter,
    queries: list[str],
    context: str | None,
    cfg: RewriteConfig,
) -> tuple[list[str], RewriteStatus]:
    """Run the rewrite stage of LLD 10.0 and return ``(queries to search, status)``.

    ``disabled`` never calls the rewriter. Any exception, a timeout past
    ``cfg.timeout_ms``, a reply with a different number of queries or a blank query, and
    a reply whose own status is ``failed`` all give the raw queries and ``failed``.
    A rewrite identical to the input is ``unchanged``; anything else is ``applied``.
    """
    raw = list(queries)
    if not cfg.enabled:
        return raw, "disabled"
    # LLD 2.3: max_context_chars caps the current-turn context sent to the model; with
    # no context the rewriter works from the raw queries alone (LLD 10.0 rules).
    ctx = context[: cfg.max_context_chars] if context else None
    try:
        result = _call_with_timeout(rewriter, raw, ctx, cfg.timeout_ms / 1000.0)
    except TimeoutError:
        log.warning("query rewrite timed out after %d ms; searching on the raw queries", cfg.timeout_ms)
        return raw, "failed"
    except Exception as exc:  # RewriteError or anything else: the search must go on
        log.warning("query rewrite failed (%s: %s); searching on the raw queries", type(exc).__name__, exc)
        return raw, "failed"
    if result.status == "failed":
        log.warning("query rewriter reported failure; searching on the raw queries")
        return raw, "failed"
    rewritten = list(result.queries)
    # LLD 10.0 rule 1: one standalone query per raw query, so a rewrite can never add,
    # drop or blank out a query the agent asked for.
    if len(rewritten) != len(raw) or any(not isinstance(q, str) or not q.strip() for q in rewritten):
        log.warning(
            "query rewriter returned %d queries for %d (or a blank one); searching on the raw queries",
            len(rewritten),
            len(raw),
        )
        return raw, "failed"
    if rewritten == raw:
        return raw, "unchanged"
    return rewritten, "applied"


def _call_with_timeout(
    rewriter: QueryRewriter, queries: list[str], context: str | None, timeout_s: float
) -> RewriteResult:
    """Call the rewriter on a daemon thread and wait at most ``timeout_s``.

    A daemon thread (not a pool) so a hung hosted call can neither hold up the search
    past ``timeout_ms`` (LLD 2.3) nor keep the process alive at exit; the abandoned
    call's eventual result is discarded.
    """
    future: Future[RewriteResult] = Future()

    def work() -> None:
        try:
            future.set_result(rewriter.rewrite(list(queries), context))
        except BaseException as exc:  # handed to the caller, which decides
            future.set_exception(exc)

    threading.Thread(target=work, name="retold-rewrite", daemon=True).start()
    # concurrent.futures.TimeoutError is the builtin TimeoutError since Python 3.11.
    return future.result(timeout=max(timeout_s, 0.0))
