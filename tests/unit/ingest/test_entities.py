"""Entity resolution, aliases and merges on a real store."""

from __future__ import annotations

import sqlite3

import pytest

from retold.host import MemoryHost
from retold.ingest.entities import EntityError, EntityResolver
from retold.models import EntityMention, Principal, Scope
from retold.names import normalize_alias, normalize_canonical
from retold.store import Store
from retold.store.base import marks
from retold.store.entities import EntityMergeError
from retold.testing import make_record
from tests.sql import fts_ids

AGENT = "research-agent"
ADITYA = Scope("user", "aditya")
PROJECT = Scope("project", "retold")
SECRET = Scope("project", "secret")
# The session names project:retold, so aditya belongs to it; project:secret needs a membership.
PRINCIPAL = Principal(agent_id=AGENT, user_id="aditya", session_id="s1", project_id="retold")
PRIVATE = PRINCIPAL.private_scope


@pytest.fixture
def resolver(store: Store) -> EntityResolver:
    return EntityResolver(store)


def _entity(store: Store, kind: str, name: str, scope: Scope, *aliases: str) -> str:
    entity = store.create_entity(kind, normalize_canonical(name), scope, status="confirmed")
    for alias in (name, *aliases):
        store.add_alias(entity.id, normalize_alias(alias))
    return entity.id


def _about(text: str, kind: str = "project", entity_id: str | None = None) -> EntityMention:
    return EntityMention(kind=kind, text=text, role="about", entity_id=entity_id)  # type: ignore[arg-type]


def _fts(store: Store, column: str, phrase: str) -> set[str]:
    """Record ids whose lexical-index ``column`` matches ``phrase``, read through a second
    connection."""
    return fts_ids(store, phrase, column)


# -- alias lookup -------------------------------------------------------------------------


def test_alias_lookup_resolves_only_within_readable_scopes(store: Store, resolver: EntityResolver) -> None:
    hidden = _entity(store, "project", "Atlas", SECRET)

    [res] = resolver.resolve([_about("Atlas")], PRIVATE, PRINCIPAL)
    assert res.outcome == "created"  # the unreadable entity is invisible, not linked
    assert res.entity is not None and res.entity.id != hidden and res.entity.scope == PRIVATE

    store.put_grant(AGENT, SECRET, read=True, write=False)
    [res] = resolver.resolve([_about("Atlas")], PRIVATE, PRINCIPAL)
    # The grant alone does not admit a non-member: only the private entity matches.
    assert res.outcome == "resolved" and res.entity is not None and res.entity.scope == PRIVATE
    store.put_member(SECRET, "aditya", added_by="admin")
    hits = store.entities_by_alias("atlas", scopes=[SECRET], kinds=["project"])
    assert [e.id for e in hits] == [hidden]
    # Now two readable entities own the alias: never pick one.
    [res] = resolver.resolve([_about("Atlas")], PRIVATE, PRINCIPAL)
    assert res.outcome == "ambiguous"
    assert sorted(res.candidates) == sorted([hidden, *(e.id for e in store.entities_by_alias(
        "atlas", scopes=[PRIVATE]))])


def test_alias_lookup_ignores_other_kinds_and_merged_entities(store: Store, resolver: EntityResolver) -> None:
    person = _entity(store, "person", "Atlas", PRIVATE)
    [res] = resolver.resolve([_about("Atlas", kind="project")], PRIVATE, PRINCIPAL)
    assert res.outcome == "created" and res.entity is not None and res.entity.id != person
    assert [e.id for e in store.entities_by_alias("atlas", scopes=[PRIVATE], kinds=["person"])] == [person]


def test_unknown_alias_creates_provisional_entity_in_writers_scope(
    store: Store, resolver: EntityResolver
) -> None:
    store.put_grant(AGENT, PROJECT, read=True, write=True)
    [res] = resolver.resolve([_about("  Agentic   Memory ")], PROJECT, PRINCIPAL)

    assert res.outcome == "created" and res.entity is not None
    stored = store.get_entity(res.entity.id)
    assert stored is not None
    assert (stored.kind, stored.canonical, stored.scope, stored.status) == (
        "project", "Agentic Memory", PROJECT, "provisional"
    )
    assert stored.aliases == ["agentic memory"]
    assert stored.id.startswith("ent_")
    [event] = store.events(kind="entity.created")
    assert event["entity_id"] == stored.id and event["actor"] == AGENT

    # The second mention of the same name in one call resolves to the new entity.
    [again] = resolver.resolve([_about("agentic memory")], PROJECT, PRINCIPAL)
    assert again.outcome == "resolved" and again.entity is not None and again.entity.id == stored.id


def test_unknown_alias_in_an_unwritable_scope_is_refused_and_writes_nothing(
    store: Store, resolver: EntityResolver
) -> None:
    store.put_grant(AGENT, PROJECT, read=True, write=False)
    with pytest.raises(EntityError) as caught:
        resolver.resolve([_about("Atlas")], PROJECT, PRINCIPAL)
    assert caught.value.code == "scope_not_writable"
    assert store.entities_by_alias("atlas", scopes=[PROJECT, PRIVATE]) == []
    assert store.events(kind="entity.created") == []


def test_creation_joins_the_callers_transaction(store: Store, resolver: EntityResolver) -> None:
    with pytest.raises(RuntimeError), store.atomic():
        [res] = resolver.resolve([_about("Atlas")], PRIVATE, PRINCIPAL)
        assert res.outcome == "created"
        raise RuntimeError("the write failed later")
    assert store.entities_by_alias("atlas", scopes=[PRIVATE]) == []
    assert store.events(kind="entity.created") == []


def test_alias_matching_two_readable_entities_is_ambiguous_with_both_ids(
    store: Store, resolver: EntityResolver
) -> None:
    store.put_grant(AGENT, PROJECT, read=True, write=True)
    store.put_grant(AGENT, ADITYA, read=True, write=True)
    first = _entity(store, "project", "Atlas", PROJECT)
    second = _entity(store, "project", "Atlas", ADITYA)
    before = store.events()

    [res] = resolver.resolve([_about("ATLAS")], PROJECT, PRINCIPAL)

    assert res.outcome == "ambiguous" and res.entity is None
    assert sorted(res.candidates) == sorted([first, second])
    assert store.events() == before  # the resolver logs nothing; the ingestor does
    described = {d["id"]: d for d in resolver.describe_candidates(res.candidates)}
    assert described[first] == {
        "id": first, "kind": "project", "canonical": "Atlas", "scope": "project:retold"
    }
    assert described[second]["scope"] == "user:aditya"


# -- explicit ids ---------------------------------------------------------------------------


def test_explicit_entity_id_skips_alias_resolution(store: Store, resolver: EntityResolver) -> None:
    store.put_grant(AGENT, PROJECT, read=True, write=True)
    chosen = _entity(store, "project", "Atlas", PROJECT)
    _entity(store, "project", "Atlas", PRIVATE)  # the alias alone would be ambiguous

    [res] = resolver.resolve([_about("atlas", entity_id=chosen)], PROJECT, PRINCIPAL)

    assert res.outcome == "explicit" and res.entity is not None and res.entity.id == chosen


def test_unreadable_explicit_id_answers_exactly_like_a_missing_one(
    store: Store, resolver: EntityResolver
) -> None:
    hidden = _entity(store, "project", "Atlas", SECRET)
    missing = "ent_does_not_exist"

    with pytest.raises(EntityError) as unreadable:
        resolver.resolve([_about("x", entity_id=hidden)], PRIVATE, PRINCIPAL)
    with pytest.raises(EntityError) as absent:
        resolver.resolve([_about("x", entity_id=missing)], PRIVATE, PRINCIPAL)

    assert unreadable.value.code == absent.value.code == "entity_not_readable"
    assert str(unreadable.value).replace(hidden, "<id>") == str(absent.value).replace(missing, "<id>")
    # Not even a kind check runs first: a wrong kind on a hidden id still reads as missing.
    with pytest.raises(EntityError) as wrong_kind:
        resolver.resolve([_about("x", kind="person", entity_id=hidden)], PRIVATE, PRINCIPAL)
    assert wrong_kind.value.code == "entity_not_readable"


def test_merged_explicit_id_follows_to_the_survivor(store: Store, resolver: EntityResolver) -> None:
    source = _entity(store, "project", "Atlas", PRIVATE)
    target = _entity(store, "project", "Atlas Platform", PRIVATE)
    store.merge_entities(source, target, actor="admin", reason="same project")

    [res] = resolver.resolve([_about("x", entity_id=source)], PRIVATE, PRINCIPAL)

    assert res.outcome == "explicit" and res.entity is not None and res.entity.id == target


def test_merge_survivor_in_an_unreadable_scope_answers_like_missing(
    store: Store, resolver: EntityResolver
) -> None:
    source = _entity(store, "project", "Atlas", PRIVATE)
    target = _entity(store, "project", "Atlas Platform", SECRET)
    store.merge_entities(source, target, actor="admin", reason="same project")

    with pytest.raises(EntityError) as caught:
        resolver.resolve([_about("x", entity_id=source)], PRIVATE, PRINCIPAL)
    assert caught.value.code == "entity_not_readable"
    assert target not in str(caught.value)


def test_explicit_id_of_another_kind_is_a_kind_mismatch(store: Store, resolver: EntityResolver) -> None:
    repo = _entity(store, "repo", "atlas-cli", PRIVATE)
    with pytest.raises(EntityError) as caught:
        resolver.resolve([_about("atlas-cli", kind="project", entity_id=repo)], PRIVATE, PRINCIPAL)
    assert caught.value.code == "entity_kind_mismatch"


# -- merges -----------------------------------------------------------------------------------


def test_merge_repoints_links_and_unions_aliases(store: Store) -> None:
    source = _entity(store, "person", "Bobby", ADITYA, "Bob T")
    target = _entity(store, "person", "Robert", ADITYA)
    only_source = make_record(content="Bobby likes tea.")
    both = make_record(content="Robert and Bobby met.")
    for record in (only_source, both):
        store.write_record(record)
    store.link_record(only_source.id, [(source, "mentions")])
    store.link_record(both.id, [(source, "about"), (target, "mentions")])

    report = store.merge_entities(source, target, actor="admin", reason="same person")

    assert store.record_links(only_source.id) == [(target, "mentions")]
    assert store.record_links(both.id) == [(target, "about")]  # one row, the about role kept
    assert store.records_linked_to(source) == []
    assert set(store.records_linked_to(target)) == {only_source.id, both.id}
    survivor, merged = store.get_entity(target), store.get_entity(source)
    assert survivor is not None and merged is not None
    assert survivor.aliases == ["bob t", "bobby", "robert"]
    assert (merged.status, merged.merged_into) == ("merged", target)
    assert report.links_repointed == 2 and report.aliases_added == ["bob t", "bobby"]
    # Lookup of a source-only name reaches the survivor and never the merged entity.
    assert [e.id for e in store.entities_by_alias("bobby", scopes=[ADITYA])] == [target]
    [event] = store.events(kind="entity.merged")
    assert event["entity_id"] == source and event["payload"]["target_id"] == target
    assert event["payload"]["reason"] == "same person"


def test_merge_refuses_other_kinds_and_inactive_entities_and_changes_nothing(store: Store) -> None:
    person = _entity(store, "person", "Atlas", ADITYA)
    project = _entity(store, "project", "Atlas", ADITYA)
    other = _entity(store, "person", "Robert", ADITYA)
    with pytest.raises(EntityMergeError):
        store.merge_entities(person, project, actor="admin", reason="x")
    with pytest.raises(EntityMergeError):
        store.merge_entities(person, "ent_missing", actor="admin", reason="x")
    store.merge_entities(person, other, actor="admin", reason="x")
    with pytest.raises(EntityMergeError):  # a merged entity is no longer active
        store.merge_entities(person, other, actor="admin", reason="again")
    unchanged = store.get_entity(project)
    assert unchanged is not None and unchanged.status == "confirmed" and unchanged.aliases == ["atlas"]
    assert len(store.events(kind="entity.merged")) == 1


def test_merge_rewrites_subjects_and_rebuilds_fts_aliases(store: Store) -> None:
    source = _entity(store, "person", "Bobby Tables", ADITYA)
    target = _entity(store, "person", "Robert", ADITYA)
    subject_rec = make_record(
        content="Works at the school.", subject_entity_id=source, attribute="employer",
        subject=f"{source}/employer",
    )
    episodic = make_record(
        type="episodic", content="Met in March.", subject_entity_id=source, attribute=None,
        subject=f"{source}/-",
    )
    target_rec = make_record(
        content="Prefers mornings.", subject_entity_id=target, attribute="schedule",
        subject=f"{target}/schedule",
    )
    for record in (subject_rec, episodic, target_rec):
        store.write_record(record)
    store.link_record(subject_rec.id, [(source, "about")])
    store.link_record(episodic.id, [(source, "about")])
    store.link_record(target_rec.id, [(target, "about")])
    assert _fts(store, "aliases", "tables") == {subject_rec.id, episodic.id}
    version_before = store.records_version()

    report = store.merge_entities(source, target, actor="admin", reason="same person")

    rewritten = store.get_record(subject_rec.id)
    assert rewritten is not None
    assert (rewritten.subject_entity_id, rewritten.subject) == (target, f"{target}/employer")
    ep = store.get_record(episodic.id)
    assert ep is not None and ep.subject == f"{target}/-"
    assert rewritten.index_version > version_before and ep.index_version > version_before
    assert sorted(report.records_rewritten) == sorted([subject_rec.id, episodic.id])
    # The lexical channel sees the union of names: a name only the source had now finds
    # the survivor's own record, and the survivor's name finds the source's records.
    assert _fts(store, "aliases", "tables") == {subject_rec.id, episodic.id, target_rec.id}
    assert _fts(store, "aliases", "robert") == {subject_rec.id, episodic.id, target_rec.id}
    # The FTS subject column was rewritten too.
    assert _fts(store, "subject", target) == {subject_rec.id, episodic.id, target_rec.id}
    assert _fts(store, "subject", source) == set()
    untouched = store.get_record(target_rec.id)
    assert untouched is not None and untouched.subject == f"{target}/schedule"


# -- the principal entity -----------------------------------------------------------------------


def test_principal_entity_is_created_once_and_confirmed(store: Store, resolver: EntityResolver) -> None:
    first = resolver.principal_entity(PRINCIPAL)
    second = resolver.principal_entity(PRINCIPAL)
    assert first.outcome == "created" and second.outcome == "resolved"
    assert first.entity is not None and second.entity is not None
    assert first.entity.id == second.entity.id
    entity = first.entity
    assert (entity.scope, entity.status, entity.aliases) == (ADITYA, "confirmed", ["aditya"])


def test_two_person_entities_carrying_the_principal_alias_are_ambiguous_not_an_exception(
    store: Store, resolver: EntityResolver
) -> None:
    one = _entity(store, "person", "aditya", ADITYA)
    two = _entity(store, "person", "Aditya", ADITYA)

    res = resolver.principal_entity(PRINCIPAL)

    assert res.outcome == "ambiguous" and res.entity is None
    assert sorted(res.candidates) == sorted([one, two])


def test_provision_user_aliases_make_a_display_name_resolve_to_the_principal(
    store: Store, resolver: EntityResolver
) -> None:
    principal = Principal(agent_id=AGENT, user_id="u-7f3a", session_id="s1")
    host = MemoryHost(store)
    host.grant(AGENT, Scope("user", "u-7f3a"), read=True, write=True)
    provisioned = host.provision_user("u-7f3a", aliases=["Aditya Rao", "Aditya"])

    [res] = resolver.resolve(
        [_about("aditya  rao", kind="person")], Scope("user", "u-7f3a"), principal
    )

    assert res.outcome == "resolved" and res.entity is not None
    assert res.entity.id == provisioned.id
    own = resolver.principal_entity(principal)
    assert own.entity is not None and own.entity.id == provisioned.id


# -- bounded alias batches and normalisation ------------------------------------------------


@pytest.mark.sqlite_only("lowers SQLite's bound-parameter limit")
def test_300_token_query_alias_batch_returns_without_sqlite_error(store: Store) -> None:
    target = _entity(store, "project", "Agentic Memory", PRIVATE)
    tokens = [f"tok{i}" for i in range(300)]
    tokens[150:152] = ["agentic", "memory"]
    grams = [" ".join(tokens[i : i + n]) for n in (1, 2, 3) for i in range(len(tokens) - n + 1)]
    assert len(grams) > 800
    # Lower this connection's bound-parameter limit far below the n-gram count: an
    # IN (?, ...) list would now fail, so success proves the batch is bounded.
    store._conn.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, 64)
    with pytest.raises(sqlite3.OperationalError):
        store._conn.execute(f"SELECT 1 WHERE 'x' IN ({marks(grams)})", grams)

    found = store.entities_by_aliases(grams, scopes=[PRIVATE, PROJECT])

    assert list(found) == ["agentic memory"]
    assert [e.id for e in found["agentic memory"]] == [target]
    assert found["agentic memory"][0].aliases == ["agentic memory"]


def test_diacritics_case_and_whitespace_normalise(store: Store, resolver: EntityResolver) -> None:
    assert normalize_alias("  José  Núñez ") == "jose nunez"
    assert normalize_canonical("  José  Núñez ") == "José Núñez"
    [created] = resolver.resolve([_about("  José  Núñez ", kind="person")], PRIVATE, PRINCIPAL)
    assert created.outcome == "created" and created.entity is not None
    assert created.entity.canonical == "José Núñez"

    for spelling in ("jose nunez", "JOSÉ NUÑEZ", "Jose\tNunez"):
        [res] = resolver.resolve([_about(spelling, kind="person")], PRIVATE, PRINCIPAL)
        assert res.outcome == "resolved" and res.entity is not None
        assert res.entity.id == created.entity.id
