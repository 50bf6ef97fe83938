"""Entity-resolution cases that need the whole write path (entity linking on write)."""

from __future__ import annotations

from retold.models import EntityMention, Scope
from retold.names import normalize_alias
from retold.testing import ADITYA, World
from tests.sql import rows


def _two_projects_named_atlas(world: World) -> list[str]:
    store = world.rt.store
    world.share(Scope("project", "p1"))
    ids = []
    for scope in (ADITYA, Scope("project", "p1")):
        entity = store.create_entity("project", "Atlas", scope)
        store.add_alias(entity.id, normalize_alias("Atlas"))
        ids.append(entity.id)
    return ids


def test_ambiguous_about_entity_returns_candidates_and_writes_nothing(world: World) -> None:
    ids = _two_projects_named_atlas(world)
    before = world.counts()
    result = world.write(content="Atlas ships weekly.", attribute="cadence",
                         entities=[("project", "Atlas", "about")])
    assert result.outcome == "entity_ambiguous" and result.error is not None
    candidates = result.error.details["candidates"]
    assert {c["id"] for c in candidates} == set(ids)
    assert {c["scope"] for c in candidates} == {"user:aditya", "project:p1"}
    assert all(c["kind"] == "project" and c["canonical"] == "Atlas" for c in candidates)
    assert world.counts() == before


def test_ambiguous_mention_is_dropped_and_the_write_succeeds(world: World) -> None:
    _two_projects_named_atlas(world)
    result = world.write(content="Aditya reviews release notes.", attribute="review_duty",
                         entities=[("project", "Atlas", "mentions")])
    assert result.outcome == "created"
    assert result.note is not None and "ambiguous mention 'Atlas' not linked" in result.note
    record = world.record(result.record_id)
    assert len(record.entity_ids) == 1  # only the principal entity
    (event,) = world.events("record.created")
    assert event["payload"]["ambiguous_mention"][0]["text"] == "Atlas"


def test_explicit_entity_id_resolves_an_ambiguity(world: World) -> None:
    ids = _two_projects_named_atlas(world)
    result = world.write(content="Atlas ships weekly.", attribute="cadence",
                         entities=[EntityMention("project", "Atlas", "about", ids[0])])
    assert result.outcome == "created"
    assert world.record(result.record_id).subject_entity_id == ids[0]


def test_unreadable_explicit_entity_answers_like_a_missing_one(world: World) -> None:
    hidden = world.rt.store.create_entity("project", "Secret", Scope("project", "hidden"))
    unreadable = world.write(content="Secret is late.", attribute="status",
                             entities=[EntityMention("project", "Secret", "about", hidden.id)])
    missing = world.write(content="Secret is late.", attribute="status",
                          entities=[EntityMention("project", "Secret", "about", "ent_nope")])
    assert unreadable.outcome == missing.outcome == "not_found"
    assert unreadable.note == missing.note.replace("ent_nope", hidden.id)  # type: ignore[union-attr]


def test_two_person_entities_with_the_principal_alias_are_ambiguous_not_an_error(world: World) -> None:
    twin = world.rt.store.create_entity("person", "Aditya (old)", ADITYA)
    world.rt.store.add_alias(twin.id, "aditya")
    before = world.counts()
    result = world.write(content="Prefers dark mode.", attribute="theme")
    assert result.outcome == "entity_ambiguous"
    assert len(result.error.details["candidates"]) == 2  # type: ignore[union-attr]
    assert world.counts() == before


def test_provisioned_display_name_resolves_to_the_principal_entity(world: World) -> None:
    world.rt.host.provision_user("aditya", aliases=["Aditya Sharma"])
    about_name = world.write(content="Aditya Sharma prefers tea.", attribute="drink",
                             entities=[("person", "Aditya Sharma", "about")])
    implicit = world.write(content="Prefers dark mode.", attribute="theme")
    assert world.record(about_name.record_id).subject_entity_id == \
        world.record(implicit.record_id).subject_entity_id


def test_unknown_entity_is_created_provisional_in_the_writers_scope(world: World) -> None:
    result = world.write(content="Acme North renews in May.", attribute="renewal_month",
                         entities=[("org", "Acme North", "about")])
    entity = world.rt.store.get_entity(world.record(result.record_id).subject_entity_id or "")
    assert entity is not None
    assert (entity.scope, entity.status, entity.canonical) == (ADITYA, "provisional", "Acme North")
    [(aliases,)] = rows(world.rt.store, "SELECT aliases FROM records_fts WHERE record_id = ?",
                        result.record_id)
    assert "acme north" in aliases
