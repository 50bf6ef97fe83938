"""UtilityOrchestrator: one user turn's host-issued memory, decided by need and fail-closed.

::

    turn ──► plan gaps ──none──► no_gap                      (the draft is served
              │                                                in every case but one)
              ▼ one host-issued search per gap
           candidates ──none──► no_candidates
              │
              ▼ the judge, given the model's own draft
           admitted ──none──► none_admitted
              │
              ├─ bundle without a recorded pass ──► shadow
              ▼
           regenerate once with the admitted records ──► regenerated (that reply is served)

Any failure, a malformed answer, or the whole decision outrunning ``utility.timeout_ms``
ends the turn as ``failed`` with the stage named, and the draft is served: memory the
host was not asked for may improve a reply, never cost one. Every decided turn leaves one
:class:`~retold.utility.decision.TurnDecision` in the store.
"""

from __future__ import annotations

import contextvars
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from retold.clock import Clock, new_id, to_iso
from retold.config import Config
from retold.errors import StoreError
from retold.hosted.client import HostedError
from retold.hosted.spend import Spend, counting
from retold.models import Principal, SearchRequest
from retold.policy.prompt import RECALLED_HEADER
from retold.policy.sensitivity import SensitivityRules
from retold.retrieve.explain import short_id
from retold.store import Store
from retold.tools.handlers import ToolHandlers
from retold.utility.admission import AdmissionInput, AdmissionJudge, Shown
from retold.utility.bundles import bundle_hash
from retold.utility.decision import Stage, TurnDecision, Verdict
from retold.utility.planner import GapPlanner, PlannerInput

__all__ = ["Served", "TurnInput", "UtilityOrchestrator", "recalled_block"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TurnInput:
    """The user turn a decision is for, and what the planner may see around it."""

    principal: Principal
    turn_index: int  # the turn's position among the session's recorded messages
    text: str
    context: str = ""  # the recent conversation before the turn
    profile: str = ""  # the session's profile block


@dataclass(frozen=True)
class Served:
    """The reply to serve and the decision that chose it."""

    reply: str
    decision: TurnDecision

    @property
    def regenerated(self) -> bool:
        return self.decision.disposition == "regenerated"


class _Failed(Exception):
    def __init__(self, stage: Stage, error: str) -> None:
        super().__init__(error)
        self.stage: Stage = stage


def recalled_block(admitted: list[tuple[str, str, Verdict]]) -> str:
    """The text appended for the regeneration: each admitted record (id, content) with
    why it was admitted, under :data:`RECALLED_HEADER`."""
    lines = [RECALLED_HEADER]
    for record_id, content, verdict in admitted:
        why = "corrects the draft" if verdict.effect == "contradicts" else "fills a gap"
        lines.append(f"[{short_id(record_id)}] {content}\n({why}: {verdict.reason})")
    return "\n".join(lines)


class UtilityOrchestrator:
    """Host-issued memory for ``host_only`` and ``hybrid`` with ``utility.enabled``."""

    def __init__(self, tools: ToolHandlers, store: Store, config: Config, clock: Clock, *,
                 planner: GapPlanner | None, judge: AdmissionJudge | None, components: dict[str, Any],
                 timer: Callable[[], float] = time.perf_counter,
                 sensitivity: SensitivityRules | None = None) -> None:
        self._tools, self._store, self._config, self._clock = tools, store, config, clock
        # The planner and the admission judge are hosted models: the records they are
        # shown (in the profile block, as candidates) are masked as the tenant's pack
        # redacts them. The regeneration is the host's own model, as a search's reader is.
        self._sensitivity = sensitivity or SensitivityRules()
        self._planner, self._judge, self._timer = planner, judge, timer
        self.components = components  # what decides a turn here: retold.utility.bundles
        self.bundle = bundle_hash(components)
        self._shadow_logged = False

    def may_serve(self) -> bool:
        """Whether this bundle has a recorded pass in this store (re-read every turn, so a
        result recorded by an operator takes effect without a restart)."""
        try:
            return self._store.bundle_passed(self.bundle)
        except StoreError as exc:
            log.warning("bundle %s: fitness not readable, serving drafts: %s", self.bundle, exc)
            return False

    def respond(self, turn: TurnInput, draft: str, regenerate: Callable[[str], str]) -> Served:
        """Decide ``turn``'s memory given the model's ``draft`` (made without recalled
        memory) and return the reply to serve. ``regenerate(block)`` asks the model once
        more with ``block`` appended; it is called at most once. Never raises: a failure
        serves the draft."""
        principal = turn.principal
        decision = TurnDecision(
            new_id(), to_iso(self._clock.now()), principal.agent_id, principal.user_id,
            principal.session_id or "", turn.turn_index, self.bundle)
        started = self._timer()
        deadline = started + self._config.utility.timeout_ms / 1000
        reply = draft
        spend = Spend()
        try:
            with counting() as spend:
                reply = self._decide(turn, draft, regenerate, decision, deadline)
        except _Failed as failed:
            decision.disposition, decision.failed_stage, decision.error = "failed", failed.stage, str(failed)
            reply = draft
        decision.hosted_calls = spend.calls
        decision.hosted_tokens = spend.input_tokens + spend.output_tokens
        decision.timings_ms["total"] = round((self._timer() - started) * 1000, 3)
        self._keep(decision)
        return Served(reply, decision)

    # -- the stages ---------------------------------------------------------------------

    def _decide(self, turn: TurnInput, draft: str, regenerate: Callable[[str], str],
                decision: TurnDecision, deadline: float) -> str:
        settings = self._config.utility
        if len(turn.text.strip()) < self._config.retrieval.trigger.host_min_query_chars:
            decision.disposition = "skipped"
            return draft
        # Every text a hosted stage reads is masked: the user's turn and the draft can quote
        # what the pack keeps out of hosted models as well as the records can.
        mask = self._sensitivity.mask
        asked = PlannerInput(mask(turn.text), mask(turn.context), mask(turn.profile), settings.max_gaps)
        decision.gaps = self._stage("planner", decision, deadline,
                                    lambda ms: self._need(self._planner, "planner").plan(asked, ms))
        if not decision.gaps:
            decision.disposition = "no_gap"
            return draft
        found = self._stage("search", decision, deadline, lambda _ms: self._search(turn, decision))
        if not found:
            decision.disposition = "no_candidates"
            return draft
        shown = [Shown(record_id, self._sensitivity.mask(content)) for record_id, content in found.items()]
        judged = AdmissionInput(mask(turn.text), mask(draft), decision.gaps, shown)
        decision.verdicts = self._stage("admission", decision, deadline,
                                        lambda ms: self._need(self._judge, "admission").judge(judged, ms))
        admitted = [(v.record_id, found[v.record_id], v) for v in decision.verdicts if v.admitted]
        if not admitted:
            decision.disposition = "none_admitted"
            return draft
        if not self.may_serve():
            if not self._shadow_logged:
                log.info("utility bundle %s has no recorded pass: records are admitted in shadow"
                         " and drafts are served (retold bundles record)", self.bundle)
                self._shadow_logged = True
            decision.disposition = "shadow"
            return draft
        reply = self._stage("regeneration", decision, deadline,
                            lambda ms: _within(ms, lambda: regenerate(recalled_block(admitted))))
        if not isinstance(reply, str) or not reply.strip():
            raise _Failed("regeneration", "the regenerated reply was empty")
        decision.disposition = "regenerated"
        return reply

    def _stage(self, stage: Stage, decision: TurnDecision, deadline: float, run: Callable[[int], Any]) -> Any:
        """Run one stage with the time left, timed; any failure becomes ``_Failed``."""
        left_ms = int((deadline - self._timer()) * 1000)
        if left_ms <= 0:
            raise _Failed(stage, f"timeout: {self._config.utility.timeout_ms} ms spent before the {stage}")
        began = self._timer()
        try:
            result = run(left_ms)
        except _Failed:
            raise
        except HostedError as exc:
            raise _Failed(stage, f"{exc.kind}: {exc}") from exc
        except Exception as exc:  # noqa: BLE001 - fail closed: the host must get its draft
            log.warning("utility %s failed: %s", stage, exc, exc_info=True)
            raise _Failed(stage, f"{type(exc).__name__}: {exc}") from exc
        finally:
            decision.timings_ms[stage] = round((self._timer() - began) * 1000, 3)
        if self._timer() > deadline:
            raise _Failed(stage, f"timeout: the decision outran {self._config.utility.timeout_ms} ms")
        return result

    def _search(self, turn: TurnInput, decision: TurnDecision) -> dict[str, str]:
        """One host-issued search per gap; the candidates (id to content) in first-found order.
        The judge reads them before the model does, so each search reads its list recall
        first, as a tool search does: the host-issued threshold is fitted for memory shown
        unasked, and under it most gap searches on the labelled turns that need memory came
        back empty (benchmarks/results/utility.md)."""
        found: dict[str, str] = {}
        for gap in decision.gaps:
            result = self._tools.search(turn.principal, SearchRequest(
                queries=[gap.query], context=turn.context or None, k=self._config.utility.per_gap_k,
                trigger="host", judged=True))
            if result.get("search_id"):
                decision.searches.append(result["search_id"])
            for hit in result["results"]:
                found.setdefault(hit["id"], hit["content"])
        decision.candidates = list(found)
        return found

    @staticmethod
    def _need(model: Any, stage: str) -> Any:
        if model is None:
            raise HostedError("not_configured", f"no hosted model for the {stage}: set the API key"
                              " (hosted.api_key_env) or pass one to build_runtime")
        return model

    def _keep(self, decision: TurnDecision) -> None:
        try:
            self._store.append_turn_decision(decision)
        except StoreError as exc:
            # The reply is already chosen; a store that cannot keep the row costs the
            # record of the decision, not the turn.
            log.warning("turn decision %s not stored: %s", decision.id, exc)


def _within(timeout_ms: int, call: Callable[[], str]) -> str:
    """``call()``'s answer if it comes within ``timeout_ms``. The host's model call cannot
    be interrupted, so on timeout its thread is left to finish alone and its answer is
    dropped."""
    box: list[Any] = []

    def run() -> None:
        try:
            box.append(("ok", call()))
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
            box.append(("error", exc))

    # The host's framework may keep its run configuration in context variables.
    context = contextvars.copy_context()
    worker = threading.Thread(target=context.run, args=(run,), name="retold-regenerate", daemon=True)
    worker.start()
    worker.join(timeout_ms / 1000)
    if not box:
        raise HostedError("timeout", f"the regeneration did not answer within {timeout_ms} ms")
    kind, value = box[0]
    if kind == "error":
        raise value
    return value  # type: ignore[no-any-return]
