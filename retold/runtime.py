"""build_runtime: the one composition root.

The CLI, agent adapters, Celery workers and benchmarks each build one Runtime per
process from one typed Config, and only they see it: every part below takes the
collaborators it uses as constructor arguments, wired here. Nothing here loads a model:
the embedder loads on first use, the vector index on its first refresh, and the
equivalence judge is chosen on the first write.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import replace
from datetime import timedelta
from functools import cached_property
from pathlib import Path
from typing import Any

from retold.activation.activator import Activator
from retold.activation.policy import ActivationPolicy
from retold.adapters.base import MemorySession, new_session_id
from retold.broker.scheduler import CeleryScheduler, scheduler_from_config
from retold.clock import Clock, SystemClock
from retold.config import Config, config_to_dict, is_database_url
from retold.config.env import SCRIPTED_MODEL_ENV, load_config_from_environment
from retold.config.pack import EffectivePack, effective_pack, resolve_with_config
from retold.errors import ConfigError, EmbeddingMismatchError
from retold.host import MemoryHost
from retold.hosted import CompletionClient, HostedError, client_from_config
from retold.index.embedder import Embedder, check_model_files, embedder_from_config, packaged_model
from retold.index.reranker import Reranker, reranker_from_config
from retold.index.vector import RefreshOutcome, VectorIndex
from retold.ingest.attempts import ModelSetup, RecoverTerms, stable_digest
from retold.ingest.equivalence import EquivalenceJudge, judge_from_config
from retold.ingest.extractor import Extractor, StructuredLLMExtractor
from retold.ingest.ingestor import Ingestor
from retold.ingest.promotion import Promotion
from retold.ingest.reviewer import CandidateReviewer, StructuredLLMReviewer
from retold.ingest.revision import Reviser
from retold.ingest.session import ExtractionScheduler, SessionHooks
from retold.ingest.session_end import Models, Parts, Rules, SessionEnd
from retold.models import Principal
from retold.operations import Operations
from retold.policy.lifecycle import Lifecycle
from retold.policy.sensitivity import SensitivityRules
from retold.retrieve.profile import ProfileAssembler
from retold.retrieve.retriever import Retriever
from retold.retrieve.rewrite import NoRewriter, QueryRewriter, rewriter_from_config
from retold.retrieve.search_log import SearchLogWriter
from retold.store import EmbeddingFamily, Store, open_store
from retold.tenant import check_tenant
from retold.tools.handlers import ToolHandlers
from retold.utility.admission import ADMISSION_PROMPT_VERSION, AdmissionJudge, HostedAdmissionJudge
from retold.utility.bundles import bundle_components
from retold.utility.orchestrator import UtilityOrchestrator
from retold.utility.planner import PLANNER_PROMPT_VERSION, GapPlanner, HostedGapPlanner

__all__ = ["Runtime", "build_runtime"]

log = logging.getLogger(__name__)


class Runtime:
    """The wired parts of one Retold process. Build it with :func:`build_runtime`."""

    def __init__(
        self,
        config: Config,
        store: Store,
        embedder: Embedder,
        clock: Clock,
        *,
        judge: EquivalenceJudge | None = None,
        scheduler: ExtractionScheduler | None = None,
        rewriter: QueryRewriter | None = None,
        reranker: Reranker | None = None,
        extractor: Extractor | None = None,
        reviewer: CandidateReviewer | None = None,
        planner: GapPlanner | None = None,
        admission: AdmissionJudge | None = None,
        environ: Mapping[str, str] | None = None,
        pack: EffectivePack | None = None,
    ) -> None:
        self.tenant = store.tenant  # the namespace every part below reads and writes
        # This tenant's memory pack from tenancy.pack (the built-in pack when null), with
        # where each value came from. The parts below never see the tenant: each is handed
        # the values it acts on. A pack key that restates a config key is settled once
        # here (a value the pack file sets wins, a built-in one defers to the config), so
        # the config and the pack the parts get agree.
        self.pack: EffectivePack = pack or effective_pack(config.tenancy.pack, self.tenant)
        config, self.memory_pack = resolve_with_config(self.pack, config)
        self.config = config
        self.store = store
        self.embedder = embedder
        self.clock = clock
        self.index = VectorIndex(embedder.name, embedder.version, embedder.dims,
                                 approximate=config.index.approximate)
        self.lifecycle = Lifecycle(config.policy, config.ingestion)
        self.host = MemoryHost(store, clock, max_pinned_per_scope=config.lifecycle.max_pinned_per_scope)
        # The scheduler queue.scheduler names, unless one is injected; the runtime closes
        # only one it built.
        self._built_scheduler: ExtractionScheduler | None = None
        if scheduler is None:
            scheduler = self._built_scheduler = scheduler_from_config(config, self._extract_now)
        self.scheduler: ExtractionScheduler = scheduler
        # Its thread starts with the first search, so building a runtime starts none. A store
        # opened read-only takes no row: searching it is what such a store is for, and a
        # warning per search about a log it cannot keep would be noise.
        self.search_log = SearchLogWriter(store, config.retrieval.search_log, discard=store.read_only)
        self.hooks = SessionHooks(
            store, self.scheduler,
            timedelta(minutes=config.ingestion.session_idle_timeout_minutes), clock,
        )
        self._judge = judge
        self._rewriter = rewriter
        self._reranker = reranker
        self._extractor = extractor
        self._reviewer = reviewer
        self._planner, self._admission = planner, admission
        self._environ: Mapping[str, str] = environ if environ is not None else {}
        self._closed = False

    @property
    def scripted_model(self) -> bool:
        """Whether ``RETOLD_SCRIPTED_MODEL`` is set in this process's environment: the
        framework adapters then give their agents a scripted stand-in in place of the
        chat model they were handed, so an example runs with no key and no network and
        says in its replies that no model was called."""
        return self._environ.get(SCRIPTED_MODEL_ENV, "").strip().lower() not in ("", "0", "false", "no")

    @cached_property
    def sensitivity(self) -> SensitivityRules:
        """This tenant's sensitivity classes and redaction, from its pack's governance
        block: what every write classifies with and what masks a record's text before it
        is embedded, indexed or put in a hosted model's prompt."""
        rules = ActivationPolicy(self.config.activation).rules
        return SensitivityRules(self.memory_pack.governance,
                                lambda attribute, content: rules.categorize(attribute, content).category)

    @cached_property
    def judge(self) -> EquivalenceJudge:
        """The equivalence judge: the NLI model when it loads locally, else the exact judge
        (see docs/decisions.md, "Choosing the judge without importing torch"); chosen on
        first use and named in every write event."""
        return self._judge or judge_from_config(self.config.ingestion.equivalence)

    @cached_property
    def ingestor(self) -> Ingestor:
        return Ingestor(
            self.store, self.index, self.embedder, self.judge, self.lifecycle,
            self.config.ingestion, self.clock,
            incremental_reload_max=self.config.embedding.incremental_reload_max,
            write_timeout_ms=self.config.embedding.write_timeout_ms,
            sensitivity=self.sensitivity, pack=self.memory_pack, promotion=self._promotion(),
        )

    def _promotion(self) -> Promotion | None:
        """What turns a repeated instruction into a procedural record, when the tenant's
        pack asks for it (``classes.procedural.promote_after_repeats``) and keeps the class."""
        procedural = self.memory_pack.classes.procedural
        if procedural.promote_after_repeats is None or not procedural.enabled:
            return None
        rules = ActivationPolicy(self.config.activation).rules
        return Promotion(self.store, self.index, self.embedder, self.lifecycle, self.clock,
                         lambda attribute, text: rules.categorize(attribute, text).category,
                         repeats=procedural.promote_after_repeats, keep_history=procedural.versioned)

    @cached_property
    def reviser(self) -> Reviser:
        """Manual supersede, confirm, expire, forget and restore (memory_revise, memory_forget)."""
        return Reviser(self.store, self.index, self.embedder, self.ingestor, self.lifecycle, self.clock,
                       restore_days=self.config.lifecycle.restore_days)

    @cached_property
    def session_end(self) -> SessionEnd:
        """What an ended session goes through, with the configured models:
        ``rt.session_end.run(session_id)``; ``rt.session_end.using(extractor=...)`` runs it
        with other models."""
        config = self.config
        # The ingestor is built on its first write, not with the session end.
        parts = Parts(self.store, lambda principal, request: self.ingestor.write(principal, request,
                                                                                 origin="extraction"),
                      self.embedder, self.index, self.clock, activate=self.activator.after_extraction)
        rules = Rules(config.ingestion, self.lifecycle, self.sensitivity, self.memory_pack,
                      RecoverTerms.from_config(config.queue), config.embedding.incremental_reload_max)
        return SessionEnd(parts, rules, Models(self.extractor, self.reviewer, self.model_setup()))

    def model_setup(self) -> ModelSetup:
        """What decides whether this process has hosted models, as a digest with no secret
        in it (the key's presence, not its value), and what to set when it has none."""
        hosted, ingestion = self.config.hosted, self.config.ingestion
        models = [ingestion.extraction_model, ingestion.review_model]
        key_set = bool(self._environ.get(hosted.api_key_env, "").strip())
        digest = stable_digest({"hosted": config_to_dict(hosted), "key_set": key_set, "models": models})
        for model in models:
            try:
                client_from_config(model, hosted, self._environ)
            except HostedError as exc:
                return ModelSetup(digest, f"{exc} (ingestion.extraction_model, ingestion.review_model)")
        if not key_set:
            return ModelSetup(digest, f"{hosted.api_key_env} is not set in this process's environment"
                                      " (hosted.api_key_env names the variable that holds the API key)")
        return ModelSetup(digest)

    @cached_property
    def activator(self) -> Activator:
        """The activation policy after each write, and people's review decisions."""
        policy = ActivationPolicy(self.config.activation,
                                  review_sample_rate=self.memory_pack.write_policy.review_sample_rate)
        return Activator(self.store, policy, self.clock, self.sensitivity.mask)

    @cached_property
    def profiles(self) -> ProfileAssembler:
        """Each session's profile block: ``rt.profiles.for_session(principal)``."""
        return ProfileAssembler(self.store, self.config.activation, self.clock)

    @cached_property
    def operations(self) -> Operations:
        """Maintenance: sweeps, erasure, re-embedding, snapshots, debugging reads."""
        return Operations(self.store, self.index, self.embedder, self.config, self.clock,
                          lambda principal, request: self.retriever.search(principal, request),
                          search_log=self.search_log, sensitivity=self.sensitivity,
                          pack=self.memory_pack)

    def session(self, agent_id: str, user_id: str, *, session_id: str | None = None,
                project_id: str | None = None) -> MemorySession:
        """A conversation with memory for one principal (a new session id unless given):
        it records turns, searches, writes and ends the session on exit."""
        principal = Principal(agent_id, user_id, session_id or new_session_id(), project_id)
        return MemorySession(self.tools, self.hooks, self.store, self.config, principal,
                             profiles=self.profiles, orchestrator=self.orchestrator)

    @cached_property
    def orchestrator(self) -> UtilityOrchestrator | None:
        """Host-issued memory decided by need (``utility.enabled`` in ``host_only`` or
        ``hybrid``), with the injected planner and judge, else the hosted models; None
        when it is off. Without a key it still runs, and every turn fails closed."""
        utility = self.config.utility
        if not utility.enabled or self.config.retrieval.trigger.mode == "tool_only":
            return None
        planner, judge = self._planner, self._admission
        if planner is None:
            client = self.hosted_client(utility.planner_model)
            planner = HostedGapPlanner(client, utility.max_output_tokens) if client else None
        if judge is None:
            client = self.hosted_client(utility.admission_model)
            judge = HostedAdmissionJudge(client, utility.max_output_tokens) if client else None
        return UtilityOrchestrator(self.tools, self.store, self.config, self.clock,
                                   planner=planner, judge=judge, components=self.bundle_components(),
                                   sensitivity=self.sensitivity)

    def bundle_components(self) -> dict[str, Any]:
        """What decides host-issued memory in this process (retold.utility.bundles): the
        injected planner's and judge's versions, else the configured models' with the
        prompt versions, so the hash does not depend on whether a key is set here."""
        utility = self.config.utility
        planner = (self._planner.version if self._planner is not None
                   else f"{utility.planner_model}/{PLANNER_PROMPT_VERSION}")
        judge = (self._admission.version if self._admission is not None
                 else f"{utility.admission_model}/{ADMISSION_PROMPT_VERSION}")
        family = f"{self.embedder.name}@{self.embedder.version}/{self.embedder.dims}"
        return bundle_components(self.config, planner, judge, family)

    def hosted_client(self, model: str, *, max_retries: int | None = None) -> CompletionClient | None:
        """A hosted client for ``model``, or None when no API key is configured (the product
        still runs: extraction then reports ``not_configured``)."""
        hosted = self.config.hosted
        if max_retries is not None:
            hosted = replace(hosted, max_retries=max_retries)
        try:
            return client_from_config(model, hosted, self._environ)
        except HostedError as exc:
            log.warning("hosted model %s not available: %s", model, exc)
            return None

    @cached_property
    def extractor(self) -> Extractor | None:
        """The session extractor: the injected one, else the hosted model when configured."""
        if self._extractor is not None:
            return self._extractor
        client = self.hosted_client(self.config.ingestion.extraction_model)
        return (StructuredLLMExtractor(client, self.config.ingestion, labels=self.sensitivity.labels)
                if client else None)

    @cached_property
    def reviewer(self) -> CandidateReviewer | None:
        """The candidate reviewer: the injected one, else the hosted model when configured."""
        if self._reviewer is not None:
            return self._reviewer
        client = self.hosted_client(self.config.ingestion.review_model)
        return StructuredLLMReviewer(client, self.config.ingestion) if client else None

    @cached_property
    def retriever(self) -> Retriever:
        """The search pipeline, with the hosted rewriter only when rewriting is enabled."""
        rewriter = self._rewriter
        if rewriter is None:
            rewrite = self.config.retrieval.rewrite
            # No retries: the rewrite stage's own deadline is shorter than one retry.
            client = self.hosted_client(rewrite.model, max_retries=0) if rewrite.enabled else None
            rewriter = rewriter_from_config(self.config.retrieval, client)
        return Retriever(
            self.store, self.index, self.embedder, rewriter,
            self._reranker or reranker_from_config(self.config.reranker), self.config,
            self.lifecycle, self.clock, search_log=self.search_log, pack=self.memory_pack,
            mask=self.sensitivity.mask if self.sensitivity.redacts else None,
        )

    def comparison_retriever(self) -> Retriever:
        """The search pipeline the tools use, without the hosted rewriter and without
        search-log rows: what ``retold migrate-store`` runs on two stores to compare them. A
        model's rewrite could differ between the two searches, and searches that check a
        store are no user's, so they stay out of its log and metrics."""
        return Retriever(
            self.store, self.index, self.embedder, NoRewriter(),
            self._reranker or reranker_from_config(self.config.reranker), self.config,
            self.lifecycle, self.clock,
            search_log=SearchLogWriter(self.store, self.config.retrieval.search_log, discard=True),
            pack=self.memory_pack, mask=self.sensitivity.mask if self.sensitivity.redacts else None,
        )

    @cached_property
    def tools(self) -> ToolHandlers:
        """The five tools: ``rt.tools.call(name, principal, payload)`` never raises for bad
        input; ``rt.tools.schemas(principal)`` gives the per-session schemas."""
        return ToolHandlers(self)

    def _extract_now(self, session_id: str) -> None:
        """``queue.scheduler: in_process``: extract an ended session in this process."""
        self.session_end.run(session_id)

    def refresh_index(self) -> RefreshOutcome:
        """Bring this process's vector index up to the store's records_version."""
        return self.index.refresh(self.store, self.config.embedding.incremental_reload_max)

    def flush_search_log(self, timeout_seconds: float | None = None) -> bool:
        """Wait until every search so far has its search_log row written (or counted as
        failed or dropped); False when the wait, ``retrieval.search_log.flush_timeout_seconds``
        unless given, ran out. Call it before reading rows this process just logged."""
        return self.search_log.flush(timeout_seconds)

    def close(self) -> None:
        """Write the queued search-log rows (a bounded wait), release the broker
        connections of the scheduler it built, stop the index's graph build, then close the
        store; safe to call twice."""
        if not self._closed:
            self._closed = True
            try:
                if "retriever" in self.__dict__:  # built (a cached property)
                    self.retriever.close()
                self.search_log.close()
                if isinstance(self._built_scheduler, CeleryScheduler):
                    self._built_scheduler.close()
            finally:
                self.index.close()  # a graph build stops, rather than outlive the runtime
                self.store.close()

    def __enter__(self) -> Runtime:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def build_runtime(
    config: Config | None = None,
    *,
    clock: Clock | None = None,
    embedder: Embedder | None = None,
    judge: EquivalenceJudge | None = None,
    scheduler: ExtractionScheduler | None = None,
    rewriter: QueryRewriter | None = None,
    reranker: Reranker | None = None,
    extractor: Extractor | None = None,
    reviewer: CandidateReviewer | None = None,
    planner: GapPlanner | None = None,
    admission: AdmissionJudge | None = None,
    environ: Mapping[str, str] | None = None,
    allow_migration_issues: bool = False,
    allow_embedding_mismatch: bool = False,
    tenant: str | None = None,
) -> Runtime:
    """Open (and migrate) the configured store and wire every part.

    Without ``config`` it is loaded as every Retold process loads it
    (:func:`retold.load_config`): the file named by ``RETOLD_CONFIG``, else ``config.yaml``
    in the working folder if present, then the ``RETOLD_STORE`` and ``RETOLD_BROKER_URL``
    overrides. ``queue.scheduler`` picks
    where ended sessions go: a worker over the configured broker (``celery``) or this
    process (``in_process``).

    ``embedder``, ``judge``, ``scheduler``, ``rewriter``, ``reranker``, ``extractor``,
    ``reviewer``, ``planner`` and ``admission`` replace the configured ones (tests pass
    fakes); ``clock`` replaces the wall clock. ``environ`` is where the config variables
    and hosted API keys are looked up: the process environment by default, read here in
    the composition root and nowhere else.

    A configured embedder whose library or files are missing raises
    :class:`~retold.errors.ModelMissingError` before the store is opened (the weights
    still load on first use), so no tool call later fails on it. A store whose recorded
    embedding family differs from the embedder's raises
    :class:`~retold.errors.EmbeddingMismatchError`: its vectors would never reach the index
    and dense search would find nothing. ``allow_embedding_mismatch`` is for the commands
    that repair or replace the store (``migrate``, ``reembed``, ``snapshot load``); they
    skip both checks, since a repair may run where the model is not installed.

    A memory pack file (``tenancy.pack``) that fails its check raises
    :class:`~retold.errors.ConfigError` before the store is opened.
    """
    env: Mapping[str, str] = os.environ if environ is None else environ
    config = config or load_config_from_environment(env)
    if embedder is None and not allow_embedding_mismatch:
        check_model_files(config.embedding)
    clock = clock or SystemClock()
    tenant = check_tenant(config.tenancy.tenant if tenant is None else tenant, "tenant")
    if tenant != config.tenancy.tenant:
        config = config.replace({"tenancy": {"tenant": tenant}})
    pack = effective_pack(config.tenancy.pack, tenant)  # a broken pack file fails here, not mid-session
    if not is_database_url(config.store.target) and config.store.path != ":memory:":
        Path(config.store.path).parent.mkdir(parents=True, exist_ok=True)
    store = open_store(
        config.store.target,
        tenant=tenant,
        busy_timeout_seconds=config.store.busy_timeout_seconds,
        clock=clock,
        allow_migration_issues=allow_migration_issues,
        read_only=config.store.read_only,
    )
    try:
        chosen = embedder or embedder_from_config(config.embedding)
        if not allow_embedding_mismatch:
            _check_gate(config, chosen)
            _check_family(store, chosen)
    except BaseException:
        store.close()
        raise
    return Runtime(config, store, chosen, clock, judge=judge, scheduler=scheduler,
                   rewriter=rewriter, reranker=reranker, extractor=extractor, reviewer=reviewer,
                   planner=planner, admission=admission, environ=env, pack=pack)


def _check_gate(config: Config, embedder: Embedder) -> None:
    """Refuse to run a packaged model under the gate fitted for the other one: the int8
    variant's cosines differ enough to move what answers (docs/decisions.md, "An int8
    encoder with a gate of its own"). Other models are the operator's to fit."""
    running = packaged_model(embedder.name)
    fitted = packaged_model(config.retrieval.gate.calibrated_for)
    if running is None or fitted is None or running == fitted:
        return
    raise ConfigError(
        f"retrieval.gate: the gate is fitted for {fitted} but embedding.model is "
        f"{embedder.name}; use the gate block fitted for it (config.yaml's for the float "
        f"model, config.int8.yaml's for int8) or run `python -m benchmarks.fit_gate "
        f"--config <a config naming {embedder.name}>`, then set retrieval.gate.calibrated_for: {running}"
    )


def _check_family(store: Store, embedder: Embedder) -> None:
    """Refuse an embedder of another family than the store's vectors, naming both."""
    held = store.embedding_family()
    wanted = EmbeddingFamily(embedder.name, embedder.version, embedder.dims)
    if held is None or held == wanted:
        return
    dims = f" --dims {wanted.dims}" if wanted.dims != held.dims else ""
    raise EmbeddingMismatchError(
        f"store {store.path} holds {held} vectors but the config asks for {wanted}; run "
        f"`retold reembed --model {wanted.model} --version {wanted.version}{dims}` or set "
        f"embedding.model/version/dims back to {held.model} / {held.version} / {held.dims}"
    )
