"""Query rewriting, the first stage of the read path.

A rewriter turns the agent's raw queries into standalone search queries using only those
queries and the host-supplied current-turn context: it never sees candidates, the store
or earlier results. :func:`rewrite_stage` wraps any rewriter so that a disabled, slow,
failing or misbehaving rewriter can only ever cost the rewrite, never the search: the
raw queries proceed and the status says why.

:class:`HostedLLMQueryRewriter` is the real rewriter: one structured call through the
provider-neutral CompletionClient with the versioned prompt ``prompts/rewrite_v1.md``,
whose no-invention rule is also enforced in code.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from concurrent.futures import Future
from functools import cache
from importlib.resources import files
from typing import Any, Protocol

from retold.config import RetrievalConfig, RewriteConfig
from retold.errors import RetoldError
from retold.hosted import CompletionClient, CompletionRequest, HostedError, Message
from retold.models import RewriteResult, RewriteStatus

__all__ = [
    "REWRITE_PROMPT_VERSION",
    "REWRITE_SCHEMA",
    "FakeRewriter",
    "HostedLLMQueryRewriter",
    "NoRewriter",
    "QueryRewriter",
    "RewriteError",
    "load_rewrite_prompt",
    "rewrite_stage",
    "rewriter_from_config",
]

log = logging.getLogger(__name__)


class RewriteError(RetoldError):
    """A query rewriter could not produce a usable rewrite."""


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
    """A deterministic rewriter for tests.

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


REWRITE_PROMPT_VERSION = "rewrite_v1"
# The answer the prompt asks for; the query count is checked in code, where a mismatch
# can be reported as such rather than as a schema failure.
REWRITE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"queries": {"type": "array", "items": {"type": "string", "minLength": 1}}},
    "required": ["queries"],
    "additionalProperties": False,
}
_SCHEMA_NAME = "rewritten_queries"
_WORD = re.compile(r"[^\W_]+")  # runs of letters or digits: "Aditya's" -> "Aditya", "s"


@cache
def load_rewrite_prompt() -> str:
    """The system prompt of :data:`REWRITE_PROMPT_VERSION`, read from the package data."""
    path = files("retold.retrieve").joinpath("prompts").joinpath(f"{REWRITE_PROMPT_VERSION}.md")
    return path.read_text(encoding="utf-8")


class HostedLLMQueryRewriter:
    """Rewrites queries with one structured hosted call.

    The model sees only the raw queries and the current-turn context, capped at
    ``cfg.max_context_chars``. Any hosted failure, a different number of queries, a blank
    query or an invented name raises :class:`RewriteError`, so :func:`rewrite_stage`
    searches on the raw queries and records ``failed``.
    """

    prompt_version = REWRITE_PROMPT_VERSION

    def __init__(self, client: CompletionClient, cfg: RewriteConfig) -> None:
        self.client = client
        self.cfg = cfg
        self._prompt = load_rewrite_prompt()

    def rewrite(self, queries: list[str], context: str | None) -> RewriteResult:
        """Return one rewritten query per raw query, or raise RewriteError."""
        raw = list(queries)
        ctx = context[: self.cfg.max_context_chars] if context else ""
        try:
            answer = self.client.complete(self._request(raw, ctx))
        except HostedError as exc:
            raise RewriteError(f"hosted rewrite failed ({exc.kind}): {exc}") from exc
        out = answer.get("queries")
        if not isinstance(out, list) or not all(isinstance(q, str) and q.strip() for q in out):
            raise RewriteError("the rewrite is not a list of non-blank queries")
        rewritten = [q.strip() for q in out]
        if len(rewritten) != len(raw):
            raise RewriteError(f"the rewrite has {len(rewritten)} queries for {len(raw)}")
        # The no-invention rule is enforced, not only prompted: a rewrite may name nothing
        # that the queries and the context do not.
        invented = _invented_names(rewritten, raw, ctx)
        if invented:
            raise RewriteError(f"the rewrite names what the turn does not: {', '.join(invented)}")
        return RewriteResult(rewritten, "unchanged" if rewritten == raw else "applied")

    def _request(self, queries: list[str], context: str) -> CompletionRequest:
        # JSON keeps the query boundaries unambiguous whatever the queries contain.
        turn = json.dumps({"queries": queries, "context": context}, ensure_ascii=False)
        return CompletionRequest(
            system=self._prompt,
            messages=(Message("user", turn),),
            schema=REWRITE_SCHEMA,
            schema_name=_SCHEMA_NAME,
            max_output_tokens=self.cfg.max_output_tokens,
            timeout_ms=self.cfg.timeout_ms,
        )


def _invented_names(rewritten: list[str], raw: list[str], context: str) -> list[str]:
    """Capitalised words of ``rewritten`` that occur, in any case, in neither the raw
    queries nor the context. Each query's first word is skipped: it is capitalised
    anyway."""
    known = {w.casefold() for text in (*raw, context) for w in _WORD.findall(text)}
    invented: list[str] = []
    for query in rewritten:
        for word in _WORD.findall(query)[1:]:
            if word[0].isupper() and word.casefold() not in known and word not in invented:
                invented.append(word)
    return invented


def rewriter_from_config(cfg: RetrievalConfig, client: CompletionClient | None) -> QueryRewriter:
    """HostedLLMQueryRewriter when ``retrieval.rewrite.enabled`` and a client is configured
    (built for ``retrieval.rewrite.model``), else NoRewriter."""
    if not cfg.rewrite.enabled:
        return NoRewriter()
    if client is None:
        log.warning("retrieval.rewrite.enabled but no hosted model is configured; queries stay raw")
        return NoRewriter()
    try:
        # The rewrite sits on the search path with an 800 ms budget: import the SDK now,
        # not during the first search.
        client.prepare()
    except HostedError as exc:
        log.warning("query rewriter cannot use %s (%s); every rewrite will fail", client.model, exc)
    return HostedLLMQueryRewriter(client, cfg.rewrite)


def rewrite_stage(
    rewriter: QueryRewriter,
    queries: list[str],
    context: str | None,
    cfg: RewriteConfig,
) -> tuple[list[str], RewriteStatus]:
    """Run the rewrite stage and return ``(queries to search, status)``.

    ``disabled`` never calls the rewriter. Any exception, a timeout past
    ``cfg.timeout_ms``, a reply with a different number of queries or a blank query, and
    a reply whose own status is ``failed`` all give the raw queries and ``failed``.
    A rewrite identical to the input is ``unchanged``; anything else is ``applied``.
    """
    raw = list(queries)
    if not cfg.enabled:
        return raw, "disabled"
    # max_context_chars caps the current-turn context sent to the model; with no context
    # the rewriter works from the raw queries alone.
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
    # One standalone query per raw query, so a rewrite can never add, drop or blank out a
    # query the agent asked for.
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
    past ``timeout_ms`` nor keep the process alive at exit; the abandoned call's eventual
    result is discarded.
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
