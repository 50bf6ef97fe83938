"""The synthetic store and queries the search benchmarks share.

Twenty users (one user scope each, about 4.75% of rows apiece) and two project scopes
(2.5% each), written from a vocabulary of templates ("<Name> prefers <tool> for <task>.",
incidents with ERR_<n> identifiers, file names, tickets, dates), so a typical query term
matches a small fraction of the store. Every record is linked ``about`` its user's person
entity or its project entity. The searching principal reads its own user scope and both
projects, about 10% of the rows. The first ``m`` records of a larger run are exactly a run
of ``m``, so every size is a prefix of the largest.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from retold import load_config
from retold.clock import new_id
from retold.config import Config
from retold.index.embedder import _TOKEN, Embedder, FakeEmbedder, _token_vector
from retold.models import Principal, Scope
from retold.names import normalize_alias
from retold.runtime import Runtime
from retold.store import Embedding
from retold.testing import make_record

AGENT, USER = "bench-agent", "priya"

# -- vocabulary ----------------------------------------------------------------------------

USERS = ["priya", "aditya", "mei", "tomas", "olu", "farah", "jonas", "lucia", "kenji", "amara",
         "diego", "sofia", "ravi", "ingrid", "mateo", "hana", "kwame", "elena", "yusuf", "nadia"]
PROJECTS = ["atlas", "hermes"]
COLLEAGUES = ["Farah Qureshi", "Jonas Berg", "Lucia Romano", "Kenji Sato", "Amara Obi",
              "Diego Alvarez", "Sofia Lindqvist", "Ravi Menon", "Ingrid Holm", "Mateo Rossi",
              "Hana Kim", "Kwame Mensah", "Elena Petrova", "Yusuf Demir", "Nadia Haddad",
              "Marcus Webb", "Chloe Dubois", "Arjun Nair", "Zara Malik", "Owen Price"]
TOOLS = ["neovim", "VS Code", "Emacs", "PyCharm", "Postgres", "SQLite", "Redis", "Kafka",
         "Terraform", "Ansible", "Docker", "Podman", "Kubernetes", "Helm", "Grafana",
         "Prometheus", "Datadog", "Sentry", "pytest", "Jest", "ruff", "mypy", "Poetry", "uv",
         "pnpm", "Bazel", "GitHub Actions", "CircleCI", "Jenkins", "Linear", "Jira", "Notion",
         "Obsidian", "Zotero", "Figma", "tmux", "zsh", "fish", "Warp", "DuckDB", "ClickHouse",
         "Airflow", "dbt", "Spark", "pandas", "Polars", "FastAPI", "Django", "Flask", "gRPC",
         "OpenTelemetry", "Jaeger", "Vault", "Argo CD", "Flux", "Loki", "Tempo", "k6", "Locust",
         "Playwright"]
TASKS = ["code review", "note taking", "local testing", "load testing", "data pipelines",
         "dashboards", "on-call alerts", "incident tracking", "sprint planning",
         "schema migrations", "feature flags", "secrets management", "log search", "API docs",
         "release notes", "unit tests", "profiling", "tracing", "design mockups",
         "dependency updates", "container builds", "canary deploys", "backfills", "benchmarks",
         "cost reports", "access reviews", "capacity planning", "postmortems", "onboarding docs",
         "query tuning", "cache warming", "rate limiting", "search relevance", "A/B tests",
         "fuzzing", "static analysis", "chaos drills", "backup restores", "SLO reviews",
         "changelog drafts"]
SERVICES = ["billing-api", "search-gateway", "auth-service", "ingest-worker", "notifier",
            "ledger", "scheduler", "export-service", "webhook-relay", "rate-limiter",
            "feature-store", "pdf-renderer", "usage-meter", "audit-log", "image-resizer",
            "session-cache", "geo-lookup", "email-sender", "report-builder", "sync-daemon",
            "vector-indexer", "payments-bridge", "admin-portal", "metrics-proxy", "job-runner"]
FILES = ["deploy.yml", "docker-compose.yml", "settings.py", "Makefile", "pyproject.toml",
         "schema.sql", "main.rs", "values.yaml", "nginx.conf", "alerts.rules.yml", "Dockerfile",
         "terraform/main.tf", "ci/pipeline.yml", "config/prod.toml", "migrations/0042_index.sql",
         "src/router.ts", "package.json", "Cargo.toml", "tsconfig.json", "retry_policy.py",
         "rate_limits.json", "feature_flags.yaml", "cron.yaml", "helm/values-prod.yaml",
         "secrets.enc.yaml", "logging.ini", "gunicorn.conf.py", "webpack.config.js",
         "kafka_topics.tf", "dashboards/latency.json"]
DRINKS = ["Earl Grey", "oat flat whites", "sparkling water", "matcha", "cold brew",
          "rooibos", "espresso", "chai", "kombucha", "decaf americanos"]
FOODS = ["peanuts", "gluten", "shellfish", "dairy", "spicy food", "mushrooms", "pork",
         "cilantro", "eggs", "soy"]
CITIES = ["Lisbon", "Berlin", "Nairobi", "Toronto", "Pune", "Osaka", "Austin", "Lagos",
          "Copenhagen", "Melbourne", "Bogota", "Warsaw", "Dublin", "Seoul", "Cape Town"]
LANGUAGES = ["English", "Hindi", "Gujarati", "Portuguese", "German", "Swahili", "Japanese",
             "Spanish", "French", "Yoruba", "Korean", "Polish", "Turkish", "Arabic", "Italian"]
WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday"]
TEAMS = ["platform", "payments", "growth", "data", "infra", "search", "mobile", "security"]
STYLES = ["short with code first", "detailed with trade-offs", "bullet points only",
          "annotated diffs", "step by step", "links to the docs"]
STATUSES = ["HTTP 500", "HTTP 503", "timeouts", "stale reads", "duplicate events",
            "OOM kills", "a 40% error rate", "slow queries", "dropped webhooks"]
FEATURES = ["bulk export", "SSO login", "usage alerts", "dark mode", "audit trails",
            "per-seat billing", "saved searches", "retry queues", "webhooks v2", "CSV import"]
EVENTS = ["a conference", "a customer workshop", "the offsite", "a hiring loop", "a meetup talk"]
VERBS = ["drain", "rollout", "restart", "flush-cache", "reindex", "rotate-keys"]

EPOCH = datetime(2024, 1, 1, tzinfo=UTC)
SPAN_DAYS = 975  # to early September 2026


def _date(r: random.Random) -> datetime:
    return EPOCH + timedelta(days=r.randrange(SPAN_DAYS), minutes=r.randrange(24 * 60))


def _err(r: random.Random) -> str:
    return f"ERR_{r.randrange(1000, 100_000)}"


def _ticket(r: random.Random, project: str) -> str:
    return f"{project[:3].upper()}-{r.randrange(100, 10_000)}"


def _version(r: random.Random) -> str:
    return f"v{r.randrange(1, 6)}.{r.randrange(0, 30)}.{r.randrange(0, 10)}"


def _user_record(r: random.Random, name: str) -> tuple[str, str, str, str]:
    """(type, source_kind, attribute, content) of one memory in a user's own scope."""
    d = _date(r)
    day = d.strftime("%Y-%m-%d")
    pick = r.randrange(100)
    other = r.choice(COLLEAGUES)
    if pick < 14:
        return "semantic", "user_statement", "toolpref", \
            f"{name} prefers {r.choice(TOOLS)} for {r.choice(TASKS)}."
    if pick < 22:
        return "semantic", "user_statement", "toolsetup", \
            f"{name} uses {r.choice(TOOLS)} with {r.choice(TOOLS)} for {r.choice(TASKS)}."
    if pick < 27:
        return "semantic", "user_statement", "diet", \
            f"{name} drinks {r.choice(DRINKS)} and avoids {r.choice(FOODS)} at lunch."
    if pick < 31:
        return "semantic", "user_statement", "location", \
            f"{name} is based in {r.choice(CITIES)} and works {r.choice(WEEKDAYS)} to Friday " \
            f"with the {r.choice(TEAMS)} team."
    if pick < 37:
        return "semantic", "user_statement", "answerstyle", \
            f"{name} likes answers about {r.choice(TASKS)} {r.choice(STYLES)}."
    if pick < 40:
        return "semantic", "user_statement", "manager", \
            f"{name}'s manager is {other}; their one-on-one is every {r.choice(WEEKDAYS)}."
    if pick < 43:
        return "semantic", "user_statement", "languages", \
            f"{name} speaks {r.choice(LANGUAGES)} and is learning {r.choice(LANGUAGES)}."
    if pick < 50:
        return "semantic", "agent_inference", "notes", \
            f"Keeps notes on {r.choice(TASKS)} in {r.choice(TOOLS)}, tagged by quarter."
    if pick < 62:
        return "episodic", "tool_result", "incident", \
            f"On {day} {name} fixed {_err(r)} in {r.choice(SERVICES)} by changing " \
            f"{r.choice(FILES)}."
    if pick < 72:
        return "episodic", "user_statement", "pairing", \
            f"On {day} {name} paired with {other} on {r.choice(TASKS)} for {r.choice(SERVICES)}."
    if pick < 80:
        return "episodic", "tool_result", "page", \
            f"Paged at {d.strftime('%H:%M')} on {day} because {r.choice(SERVICES)} returned " \
            f"{_err(r)}; the cause was a bad {r.choice(FILES)}."
    if pick < 85:
        end = (d + timedelta(days=r.randrange(2, 8))).strftime("%Y-%m-%d")
        return "episodic", "user_statement", "travel", \
            f"{name} travelled to {r.choice(CITIES)} from {day} to {end} for {r.choice(EVENTS)}."
    if pick < 92:
        return "procedural", "user_statement", "runbook", \
            f"To {r.choice(VERBS)} {r.choice(SERVICES)}, run make {r.choice(VERBS)} and then " \
            f"check {r.choice(FILES)}."
    return "semantic", "agent_inference", "habit", \
        f"Usually reviews {r.choice(TASKS)} on {r.choice(WEEKDAYS)} mornings before standup."


def _project_record(r: random.Random, project: str) -> tuple[str, str, str, str]:
    proj = project.capitalize()
    d = _date(r)
    day = d.strftime("%Y-%m-%d")
    pick = r.randrange(100)
    if pick < 20:
        return "semantic", "user_statement", "stack", \
            f"{proj} uses {r.choice(TOOLS)} for {r.choice(TASKS)}; the owner is {r.choice(COLLEAGUES)}."
    if pick < 45:
        return "episodic", "tool_result", "incident", \
            f"Incident {_err(r)} on {day}: {r.choice(SERVICES)} returned {r.choice(STATUSES)} " \
            f"after a change to {r.choice(FILES)} ({_ticket(r, project)})."
    if pick < 60:
        return "procedural", "user_statement", "deploy", \
            f"{proj} deploys {r.choice(SERVICES)} with {r.choice(TOOLS)} from {r.choice(FILES)} " \
            f"every {r.choice(WEEKDAYS)}."
    if pick < 80:
        return "episodic", "tool_result", "release", \
            f"{proj} release {_version(r)} on {day} shipped {r.choice(FEATURES)} for " \
            f"{r.choice(SERVICES)} ({_ticket(r, project)})."
    return "semantic", "agent_inference", "config", \
        f"In {proj}, {r.choice(FILES)} holds the {r.choice(TASKS)} settings; " \
        f"{r.choice(COLLEAGUES)} reviews changes to it."


def generate(n: int, seed: int = 11) -> list[dict[str, Any]]:
    """``n`` records; the first ``m`` of a larger run are exactly a run of ``m``."""
    r = random.Random(seed)
    out = []
    for i in range(n):
        roll = r.random()
        if roll < 0.05:  # 2.5% per project
            project = PROJECTS[int(roll / 0.025)]
            typ, kind, attr, content = _project_record(r, project)
            scope = Scope("project", project)
        else:
            user = USERS[r.randrange(len(USERS))]
            typ, kind, attr, content = _user_record(r, user.capitalize())
            scope = Scope("user", user)
        out.append({"i": i, "scope": scope, "type": typ, "source_kind": kind,
                    "attribute": f"{attr}_{i}", "content": content, "event_at": _date(r),
                    "status": "provisional" if r.random() < 0.1 else "confirmed"})
    return out


# -- queries -------------------------------------------------------------------------------


def make_queries(records: list[dict[str, Any]], count: int, seed: int = 5) -> list[list[str]]:
    """``count`` searches of one or two queries: paraphrases, identifiers and names.

    Identifiers come from records the principal can read among the first 1,000, so they
    exist at every size; a few are absent on purpose.
    """
    r = random.Random(seed)
    mine = [rec for rec in records[:1000] if rec["scope"] in
            (Scope("user", USER), *(Scope("project", p) for p in PROJECTS))]
    words = [str(rec["content"]).rstrip(".").replace(";", "").replace(":", "").replace(",", "")
             .replace("(", "").replace(")", "").split() for rec in mine]
    errs = [w for ws in words for w in ws if w.startswith("ERR_")]
    tickets = [w for ws in words for w in ws if w[:4] in ("ATL-", "HER-")]
    versions = [w for ws in words for w in ws if w.startswith("v") and w.count(".") == 2]
    files = [f for f in FILES if any(f in str(rec["content"]) for rec in mine)]
    def proj() -> str:
        return r.choice(PROJECTS).capitalize()

    def first_name() -> str:
        return r.choice(COLLEAGUES).split()[0]

    paraphrase: list[Callable[[], str]] = [
        lambda: f"which tool does Priya use for {r.choice(TASKS)}?",
        lambda: f"what do I prefer for {r.choice(TASKS)}",
        lambda: f"my favourite setup for {r.choice(TASKS)}?",
        lambda: r.choice(["what does Priya drink at lunch?", "which foods does Priya avoid?",
                          "what should I order for Priya's lunch?", "does Priya drink coffee?"]),
        lambda: r.choice(["where is Priya based?", "which team is Priya on?",
                          "what city do I work from?", "which days does Priya work?"]),
        lambda: r.choice(["who is my manager?", "when is my one-on-one?",
                          "who does Priya report to?"]),
        lambda: r.choice(["what languages do I speak?", "which language is Priya learning?"]),
        lambda: f"how do we deploy {r.choice(SERVICES)} in {proj()}?",
        lambda: f"what broke in {r.choice(SERVICES)} recently?",
        lambda: f"who owns {r.choice(TASKS)} in {proj()}?",
        lambda: f"how do I {r.choice(VERBS).replace('-', ' ')} {r.choice(SERVICES)}?",
        lambda: f"where do I keep my notes on {r.choice(TASKS)}?",
        lambda: f"what shipped in the last {proj()} release?",
        lambda: f"how should answers about {r.choice(TASKS)} be formatted for me?",
        lambda: f"when did I last pair with {first_name()}?",
        lambda: f"why was I paged about {r.choice(SERVICES)}?",
        lambda: f"which {proj()} config file controls {r.choice(TASKS)}?",
    ]
    keyword: list[Callable[[], str]] = [
        lambda: r.choice(errs),
        lambda: f"{r.choice(errs)} {r.choice(SERVICES)}",
        lambda: r.choice(files),
        lambda: r.choice(tickets) if tickets else r.choice(errs),
        lambda: f"{r.choice(versions) if versions else 'v2.3.1'} release",
        lambda: f"{r.choice(TOOLS)} {r.choice(TASKS)}",
        lambda: f"ERR_{r.randrange(100_000, 999_999)}",  # an identifier no record holds
        lambda: f"{r.choice(SERVICES)} {r.choice(FILES)}",
        lambda: f"{r.choice(STATUSES)} {r.choice(SERVICES)}",
    ]
    names: list[Callable[[], str]] = [
        lambda: r.choice(["Priya", "Priya's preferences", "about Priya", "Priya notes"]),
        lambda: r.choice([proj(), f"{proj()} project", f"{proj()} owner", f"{proj()} incidents"]),
        lambda: r.choice(COLLEAGUES),
        lambda: f"what do I know about {proj()}?",
        lambda: f"Priya and {first_name()}",
        lambda: f"{first_name()}'s team",
    ]
    seen: set[str] = set()

    def draw(family: list[Callable[[], str]]) -> str:
        for _ in range(1000):  # distinct texts: every real-model search misses the cache
            text = str(r.choice(family)())
            if text not in seen:
                seen.add(text)
                return text
        raise RuntimeError("the query vocabulary is too small for this many searches")

    out: list[list[str]] = []
    for i in range(count):
        family = (paraphrase, keyword, names)[0 if i % 10 < 4 else 1 if i % 10 < 7 else 2]
        first = draw(family)
        if r.random() < 0.3:  # a second phrasing, as an agent often sends
            out.append([first, draw(keyword if family is paraphrase else paraphrase)])
        else:
            out.append([first])
    return out


# -- stores --------------------------------------------------------------------------------


@cache
def _cached_token_vector(token: str, dims: int) -> np.ndarray:
    return _token_vector(token, dims)


def fake_vectors(contents: list[str], embedder: FakeEmbedder) -> np.ndarray:
    """What ``embedder.embed_documents`` returns, with token vectors cached (50K rows in seconds)."""
    out = np.empty((len(contents), embedder.dims), dtype=np.float32)
    for row, text in enumerate(contents):
        tokens = _TOKEN.findall(text[: embedder.max_chars].lower())
        out[row] = np.sum([_cached_token_vector(t, embedder.dims) for t in tokens], axis=0)
    out /= np.linalg.norm(out, axis=1, keepdims=True)
    sample = contents[:5]
    assert np.allclose(out[: len(sample)], embedder.embed_documents(sample), atol=1e-5)
    return out


def populate(rt: Runtime, records: list[dict[str, Any]], vectors: np.ndarray,
             after_batch: Callable[[], None] | None = None) -> None:
    """Users, projects, grants and memberships, then every record with its vector and its
    ``about`` link, 2,000 to a transaction; ``after_batch`` runs after each one."""
    about: dict[Scope, str] = {}
    for user in USERS:
        about[Scope("user", user)] = rt.host.provision_user(user, aliases=[user.capitalize()]).id
    for project in PROJECTS:
        scope = Scope("project", project)
        entity = rt.store.create_entity("project", project.capitalize(), scope, status="confirmed")
        rt.store.add_alias(entity.id, normalize_alias(project))
        about[scope] = entity.id
    rt.host.grant(AGENT, Scope("user", USER), read=True, write=True)
    for project in PROJECTS:
        rt.host.grant(AGENT, Scope("project", project), read=True, write=True)
        rt.host.add_member(Scope("project", project), USER)  # the searching user works on each
    name, version = rt.embedder.name, rt.embedder.version
    for start in range(0, len(records), 2000):
        with rt.store.atomic():
            for spec in records[start:start + 2000]:
                scope = spec["scope"]
                assert isinstance(scope, Scope)
                entity_id = about[scope]
                at = spec["event_at"]
                rec = make_record(
                    id=new_id(), type=spec["type"], content=spec["content"], scope=scope,
                    subject=f"{entity_id}/{spec['attribute']}", subject_entity_id=entity_id,
                    attribute=spec["attribute"], source_kind=spec["source_kind"],
                    source_ref=f"session:bench<turn:{spec['i']}>", evidence=spec["content"],
                    created_at=at, event_at=at, status=spec["status"], confidence=0.9,
                    creator_agent_id=AGENT,
                )
                # The one write: row, link, vector and FTS row (with the link's aliases) together.
                rt.store.write_record(rec, links=[(entity_id, "about")],
                                      embedding=Embedding(name, version, vectors[int(spec["i"])]))
        if after_batch is not None:
            after_batch()


def real_vectors(embedder: Embedder, contents: list[str]) -> np.ndarray:
    """Every content's document vector from ``embedder``, in batches, with the time it took."""
    started = time.perf_counter()
    parts = [embedder.embed_documents(contents[s:s + 256]) for s in range(0, len(contents), 256)]
    print(f"embedded {len(contents):,} records with the real model in "
          f"{time.perf_counter() - started:.0f} s", flush=True)
    return np.concatenate(parts).astype(np.float32)


# The config file every benchmark runtime starts from (None = the defaults); search_bench's
# --config sets it, e.g. to config.int8.yaml for the int8 encoder and its gate.
_base: Path | None = None


def use_config_file(path: Path | None) -> None:
    """Start every later :func:`bench_config` from the file at ``path`` (None = defaults)."""
    global _base
    _base = path


def config_file() -> Path | None:
    """The file :func:`use_config_file` chose, if any."""
    return _base


def bench_config(path: Path, **embedding: object) -> Config:
    """The benchmark's config on the store at ``path``, with ``embedding`` keys changed."""
    return load_config(config_file(), overrides={"store": {"path": str(path)}, "embedding": dict(embedding)})


def principal(session_id: str = "bench-session") -> Principal:
    """The searching principal: agent ``AGENT`` for user ``USER``."""
    return Principal(AGENT, USER, session_id, None)


def reads() -> list[Scope]:
    """The scopes the searching principal reads."""
    return [Scope("user", USER), *(Scope("project", p) for p in PROJECTS)]


def fill_search_log(rt: Runtime, records: list[dict[str, Any]], searches: int, rows: int) -> int:
    """Run ``searches`` real searches as :func:`principal`, then copy their log rows (each
    under a new id) until the search log holds ``rows``; returns how many it holds."""
    who = principal()
    for query in make_queries(records, searches):
        rt.tools.call("memory_search", who, {"queries": query})
    rt.flush_search_log()
    conn = rt.store._conn
    logged = int(conn.execute("SELECT count(*) FROM search_log").fetchone()[0])
    with rt.store.atomic():
        while logged < rows:
            copied = conn.execute("SELECT * FROM search_log LIMIT ?", (rows - logged,)).fetchall()
            for row in copied:
                conn.execute(f"INSERT INTO search_log VALUES ({', '.join('?' * len(row))})",
                             (new_id(), *row[1:]))
            logged += len(copied)
    return logged
